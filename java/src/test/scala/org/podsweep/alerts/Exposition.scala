package org.podsweep.alerts

/** One sample of a scrape: metric name, labels, value. */
final case class Sample(name: String, labels: Map[String, String], value: Double) {
  /** The label names, without those Prometheus adds to every series of a target. */
  def labelKeys: Set[String] = labels.keySet -- Exposition.TargetLabels
}

/**
 * Prometheus' text exposition format (version 0.0.4) as the daemon's `/metrics` and Kyuubi's
 * Prometheus reporter write it: `name{label="value",...} value [timestamp]`, `# TYPE name kind`,
 * other `#` lines and blank lines ignored. Also reads the series notation of promtool's test files
 * (`name{label="value"}`, no value). A line that is none of these is an error naming it.
 */
object Exposition {
  /** Labels Prometheus gives every series of a scrape target. */
  val TargetLabels: Set[String] = Set("instance", "job")

  /** The samples of `text` and the declared kind (`# TYPE`) of each metric family. */
  def parse(text: String): (Seq[Sample], Map[String, String]) = {
    val samples = Vector.newBuilder[Sample]
    val types = Map.newBuilder[String, String]
    text.split("\n").iterator.map(_.trim).filter(_.nonEmpty).foreach { line =>
      if (line.startsWith("# TYPE ")) line.stripPrefix("# TYPE ").trim.split("\\s+") match {
        case Array(name, kind) => types += name -> kind
        case _ => throw new IllegalArgumentException(s"not a TYPE line: $line")
      }
      else if (!line.startsWith("#")) samples += sample(line)
    }
    (samples.result(), types.result())
  }

  /** One sample line. */
  def sample(line: String): Sample = {
    val (name, labels, rest) = head(line)
    val fields = rest.trim.split("\\s+")
    if (fields.isEmpty || fields.size > 2 || fields(0).isEmpty)
      throw new IllegalArgumentException(s"no value (or more than a value and a timestamp) in: $line")
    Sample(name, labels, number(fields(0), line))
  }

  /** A series in promtool's notation: `name{label="value",...}`. */
  def series(text: String): (String, Map[String, String]) = {
    val (name, labels, rest) = head(text.trim)
    if (rest.trim.nonEmpty) throw new IllegalArgumentException(s"trailing text after the series: $text")
    (name, labels)
  }

  private def number(s: String, line: String): Double = s match {
    case "NaN" => Double.NaN
    case "+Inf" | "Inf" => Double.PositiveInfinity
    case "-Inf" => Double.NegativeInfinity
    case v => try v.toDouble catch {
      case _: NumberFormatException => throw new IllegalArgumentException(s"not a number ($v) in: $line")
    }
  }

  private def isNameChar(c: Char, first: Boolean): Boolean =
    (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (!first && c >= '0' && c <= '9')

  /** The metric name, the labels and what follows them. */
  private def head(line: String): (String, Map[String, String], String) = {
    var i = 0
    while (i < line.length && isNameChar(line.charAt(i), i == 0)) i += 1
    if (i == 0) throw new IllegalArgumentException(s"no metric name at the start of: $line")
    val name = line.substring(0, i)
    if (i >= line.length || line.charAt(i) != '{') return (name, Map.empty, line.substring(i))
    i += 1
    val labels = Map.newBuilder[String, String]
    def fail(why: String) = throw new IllegalArgumentException(s"$why at column ${i + 1} of: $line")
    def skipSpaces(): Unit = while (i < line.length && line.charAt(i) == ' ') i += 1
    skipSpaces()
    while (i < line.length && line.charAt(i) != '}') {
      val start = i
      while (i < line.length && isNameChar(line.charAt(i), i == start)) i += 1
      if (i == start) fail("no label name")
      val key = line.substring(start, i)
      if (i + 1 >= line.length || line.charAt(i) != '=' || line.charAt(i + 1) != '"') fail("no =\" after a label name")
      i += 2
      val value = new StringBuilder
      while (i < line.length && line.charAt(i) != '"') {
        if (line.charAt(i) == '\\' && i + 1 < line.length) {
          value.append(line.charAt(i + 1) match { case 'n' => '\n'; case c => c })
          i += 2
        } else { value.append(line.charAt(i)); i += 1 }
      }
      if (i >= line.length) fail("unterminated label value")
      i += 1
      labels += key -> value.toString
      skipSpaces()
      if (i < line.length && line.charAt(i) == ',') { i += 1; skipSpaces() }
    }
    if (i >= line.length) fail("no closing }")
    (name, labels.result(), line.substring(i + 1))
  }

  /** `name{k="v",...}` with label values escaped, labels sorted by name. */
  def notation(name: String, labels: Map[String, String]): String =
    if (labels.isEmpty) name
    else labels.toSeq.sortBy(_._1).map { case (k, v) =>
      k + "=\"" + v.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n") + "\""
    }.mkString(name + "{", ",", "}")
}
