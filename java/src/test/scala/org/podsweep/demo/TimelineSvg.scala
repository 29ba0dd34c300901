package org.podsweep.demo

import java.util.Locale

import org.podsweep.demo.Phases.PhaseResult

/**
 * The demo's picture, hand-written SVG: x is time (seconds since the podsweep phase started).
 * Top: one lane per scope, coloured by the server that said `isLeader` in each 100 ms sample
 * (grey: no leader; split lane: more than one). Below: DELETE requests per 1-s bucket as the API
 * server recorded them (kube-apiserver: its audit log), stacked by sender (each server's own
 * token). Vertical lines mark the waves of terminated pods and, in red, the failover. Right: DELETE
 * requests per server in the baseline phase (stock Kyuubi 1.12.0, or its model when Kyuubi is not
 * built: the phase's `kind` says which) next to the podsweep phase.
 */
object TimelineSvg {
  private val Palette = Seq("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")
  private val NoLeader = "#d9d9d9"
  private val FailoverRed = "#d62728"
  private val Ink = "#222222"
  private val Muted = "#666666"

  private val Width = 1200
  private val PlotLeft = 110.0
  private val PlotRight = 860.0
  private val PanelLeft = 920.0
  private val PanelRight = 1180.0
  private val LaneHeight = 24.0
  private val LaneGap = 8.0
  private val HistHeight = 220.0

  def colour(servers: Seq[String], server: String): String = {
    val i = servers.indexOf(server)
    if (i < 0) "#000000" else Palette(i % Palette.size)
  }

  private def esc(s: String): String =
    s.flatMap {
      case '&' => "&amp;"
      case '<' => "&lt;"
      case '>' => "&gt;"
      case '"' => "&quot;"
      case c => c.toString
    }

  private def n(d: Double): String = String.format(Locale.ROOT, "%.1f", Double.box(d))

  /** A tick step giving at most `max` ticks over `span`. */
  private def step(span: Double, max: Int, steps: Seq[Double]): Double =
    steps.find(s => span / s <= max).getOrElse(steps.last)

  def render(title: String, baseline: PhaseResult, p: PhaseResult, apiServer: String): String = {
    val stock = if (baseline.kind.startsWith("kyuubi")) s"stock Kyuubi (${baseline.kind})" else s"today's Kyuubi (${baseline.kind})"
    val b = new StringBuilder
    def el(s: String): Unit = b.append(s).append('\n')
    def text(x: Double, y: Double, s: String, size: Int = 12, fill: String = Ink, anchor: String = "start", weight: String = "normal"): Unit =
      el(s"""<text x="${n(x)}" y="${n(y)}" font-size="$size" fill="$fill" text-anchor="$anchor" font-weight="$weight">${esc(s)}</text>""")
    def rect(x: Double, y: Double, w: Double, h: Double, fill: String, extra: String = ""): Unit =
      if (w > 0 && h > 0) el(s"""<rect x="${n(x)}" y="${n(y)}" width="${n(w)}" height="${n(h)}" fill="$fill"$extra/>""")
    def vline(x: Double, y0: Double, y1: Double, stroke: String, width: Double, dash: String = ""): Unit =
      el(s"""<line x1="${n(x)}" y1="${n(y0)}" x2="${n(x)}" y2="${n(y1)}" stroke="$stroke" stroke-width="${n(width)}"""" +
        (if (dash.nonEmpty) s""" stroke-dasharray="$dash"""" else "") + "/>")
    def hline(x0: Double, x1: Double, y: Double, stroke: String, width: Double = 1): Unit =
      el(s"""<line x1="${n(x0)}" y1="${n(y)}" x2="${n(x1)}" y2="${n(y)}" stroke="$stroke" stroke-width="${n(width)}"/>""")

    val servers = p.servers
    val scopes = p.scopes
    val t0 = p.startMillis
    val span = math.max(1.0, math.ceil((p.endMillis - t0) / 1000.0))
    def x(atMillis: Long): Double = PlotLeft + (atMillis - t0) / 1000.0 / span * (PlotRight - PlotLeft)

    // Vertical layout.
    val legendY = 78.0
    val lanesLabelY = 112.0
    val marksTop = lanesLabelY + 6 // rows for the labels of the wave marks
    val lanesTop = marksTop + 2 * 14 + 8
    val lanesBottom = lanesTop + scopes.size * (LaneHeight + LaneGap) - LaneGap
    val histLabelY = lanesBottom + 36
    val histTop = histLabelY + 14
    val histBottom = histTop + HistHeight
    val axisLabelY = histBottom + 36
    val footerY = axisLabelY + 30
    val footerLines = 3 + p.failover.map(f => 2 + f.successors.size).getOrElse(0)
    val height = (footerY + footerLines * 17 + 16).toInt

    el(s"""<?xml version="1.0" encoding="UTF-8"?>""")
    el(s"""<svg xmlns="http://www.w3.org/2000/svg" width="$Width" height="$height" viewBox="0 0 $Width $height" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">""")
    rect(0, 0, Width, height, "#ffffff")
    text(PlotLeft - 90, 30, "podsweep: who leads each scope, and who sends the DELETEs", size = 18, weight = "bold")
    text(PlotLeft - 90, 52, title, size = 12, fill = Muted)

    // Legend: servers, no leader, marks.
    var lx = PlotLeft - 90
    servers.foreach { s =>
      rect(lx, legendY - 10, 14, 12, colour(servers, s))
      text(lx + 19, legendY, s)
      lx += 19 + 8 * s.length + 18
    }
    rect(lx, legendY - 10, 14, 12, NoLeader)
    text(lx + 19, legendY, "no leader")
    lx += 100
    vline(lx + 7, legendY - 12, legendY + 3, FailoverRed, 2)
    text(lx + 16, legendY, "failover (leader stopped)")
    lx += 185
    vline(lx + 7, legendY - 12, legendY + 3, Muted, 1, "4,3")
    text(lx + 16, legendY, "pods terminated")

    // Time grid and axis.
    val tick = step(span, 16, Seq(1, 2, 5, 10, 15, 30, 60, 120, 300))
    var t = 0.0
    while (t <= span + 1e-9) {
      val gx = PlotLeft + t / span * (PlotRight - PlotLeft)
      vline(gx, lanesTop, lanesBottom, "#eeeeee", 1)
      vline(gx, histTop, histBottom, "#eeeeee", 1)
      vline(gx, histBottom, histBottom + 5, Ink, 1)
      text(gx, histBottom + 18, if (t == t.floor) t.toLong.toString else n(t), size = 11, anchor = "middle")
      t += tick
    }
    text((PlotLeft + PlotRight) / 2, axisLabelY, "seconds since the podsweep phase started (servers created)", size = 12, anchor = "middle")

    // Leader lanes.
    text(PlotLeft - 90, lanesLabelY, "Leader per scope (each server's isLeader, sampled every 100 ms)", size = 13, weight = "bold")
    val samples = p.samples
    scopes.zipWithIndex.foreach { case (ns, i) =>
      val y = lanesTop + i * (LaneHeight + LaneGap)
      text(PlotLeft - 8, y + LaneHeight / 2 + 4, ns, anchor = "end")
      // Merge consecutive samples with the same leaders into segments [from, to).
      val segments = samples.zip(samples.drop(1)).foldLeft(Vector.empty[(Long, Long, Seq[String])]) { case (acc, (s0, s1)) =>
        val who = s0.leading.getOrElse(ns, Nil)
        acc.lastOption match {
          case Some((from, _, w)) if w == who => acc.init :+ ((from, s1.atMillis, who))
          case _ => acc :+ ((s0.atMillis, s1.atMillis, who))
        }
      }
      segments.foreach { case (from, to, who) =>
        val x0 = x(from)
        val w = x(to) - x0
        if (who.isEmpty) rect(x0, y, w, LaneHeight, NoLeader)
        else {
          val h = LaneHeight / who.size
          who.zipWithIndex.foreach { case (s, k) => rect(x0, y + k * h, w, h, colour(servers, s)) }
          if (who.size == 1 && w > 8 * who.head.length + 8)
            text(x0 + 5, y + LaneHeight / 2 + 4, who.head, size = 11, fill = "#ffffff")
        }
      }
      el(s"""<rect x="${n(PlotLeft)}" y="${n(y)}" width="${n(PlotRight - PlotLeft)}" height="${n(LaneHeight)}" fill="none" stroke="#bbbbbb"/>""")
    }

    // DELETEs per 1-s bucket, stacked by sender.
    text(PlotLeft - 90, histLabelY, s"DELETE requests per second at the API server ($apiServer), by sender", size = 13, weight = "bold")
    val buckets = math.ceil(span).toInt
    val counts: Seq[Map[String, Int]] = (0 until buckets).map { k =>
      p.deletes.filter(d => ((d.atMillis - t0) / 1000L).toInt == k).groupBy(_.bearer.getOrElse("?")).map { case (s, v) => s -> v.size }
    }
    // Headroom above the highest bar keeps the failover label box (top third) clear of the bars.
    val peak = math.max(1, counts.map(_.values.sum).max) * (if (p.failover.isDefined) 1.55 else 1.0)
    val yStep = step(peak, 6, Seq(1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000))
    val yMax = math.ceil(peak / yStep) * yStep
    def hy(v: Double): Double = histBottom - v / yMax * HistHeight
    var yv = 0.0
    while (yv <= yMax + 1e-9) {
      hline(PlotLeft, PlotRight, hy(yv), if (yv == 0) Ink else "#eeeeee")
      text(PlotLeft - 6, hy(yv) + 4, yv.toLong.toString, size = 11, anchor = "end")
      yv += yStep
    }
    val bucketWidth = (PlotRight - PlotLeft) / span
    counts.zipWithIndex.foreach { case (c, k) =>
      var acc = 0.0
      (servers ++ c.keys.filterNot(servers.contains).toSeq.sorted).foreach { s =>
        val v = c.getOrElse(s, 0)
        if (v > 0) {
          rect(PlotLeft + k * bucketWidth + 1, hy(acc + v), bucketWidth - 2, hy(acc) - hy(acc + v), colour(servers, s))
          acc += v
        }
      }
    }
    hline(PlotLeft, PlotRight, histBottom, Ink)

    // Marks: the waves (dashed) and the failover (red, with a label box).
    p.marks.filterNot(m => p.failover.exists(f => f.stopAtMillis == m.atMillis)).zipWithIndex.foreach { case (m, k) =>
      val mx = x(m.atMillis)
      val ly = marksTop + (k % 2) * 14 + 10
      vline(mx, ly - 10, lanesBottom + 4, Muted, 1, "4,3")
      vline(mx, histTop - 4, histBottom, Muted, 1, "4,3")
      text(mx + 4, ly, f"${m.label} (${(m.atMillis - t0) / 1000.0}%.1f s)", size = 11, fill = Muted)
    }
    p.failover.foreach { f =>
      val fx = x(f.stopAtMillis)
      vline(fx, lanesTop - 4, lanesBottom + 4, FailoverRed, 2)
      vline(fx, histTop - 4, histBottom, FailoverRed, 2)
      val main = f.main
      def ms(at: Option[Long]): String = at.map(a => s"${a - f.stopAtMillis} ms").getOrElse("never")
      val lines = Seq(
        f"${f.stopped} stopped at ${(f.stopAtMillis - t0) / 1000.0}%.1f s",
        s"(${f.how}, leader of ${f.successors.map(_.scope).mkString(", ")})",
        s"${f.scope}: ${main.flatMap(_.server).getOrElse("nobody")} seen leading after ${ms(main.flatMap(_.leadingAtMillis))},",
        s"its first DELETE after ${ms(main.flatMap(_.firstDeleteAtMillis))} (times from the stop)")
      val boxW = 330.0
      val boxH = lines.size * 15 + 8.0
      val bx = if (fx + 8 + boxW <= PlotRight) fx + 8 else fx - 8 - boxW
      val by = histTop + 4
      el(s"""<rect x="${n(bx)}" y="${n(by)}" width="${n(boxW)}" height="${n(boxH)}" fill="#ffffff" fill-opacity="0.92" stroke="$FailoverRed"/>""")
      lines.zipWithIndex.foreach { case (l, k) => text(bx + 6, by + 16 + k * 15, l, size = 11, fill = if (k == 0) FailoverRed else Ink) }
    }

    // Side panel: DELETE requests per server, baseline vs podsweep.
    val panelTop = lanesLabelY
    text(PanelLeft, panelTop, "DELETE requests per server", size = 13, weight = "bold")
    text(PanelLeft, panelTop + 16, "stock Kyuubi vs podsweep", size = 11, fill = Muted)
    val maxCount = math.max(1, (baseline.byServer.values ++ p.byServer.values).max)
    val barMax = PanelRight - PanelLeft - 70
    val rowTop = panelTop + 30
    val rowH = math.min(44.0, (histBottom - rowTop - 60) / math.max(1, servers.size))
    def codes(r: PhaseResult, s: String): (Int, Int) = {
      val mine = r.deletes.filter(_.bearer.contains(s))
      (mine.count(_.status == 200), mine.count(_.status != 200))
    }
    servers.zipWithIndex.foreach { case (s, i) =>
      val y = rowTop + i * rowH
      val c = colour(servers, s)
      text(PanelLeft, y + 11, s, size = 11)
      Seq(("stock", baseline), ("podsweep", p)).zipWithIndex.foreach { case ((label, r), k) =>
        val by = y + 15 + k * 13
        val (ok, other) = codes(r, s)
        val wOk = ok.toDouble / maxCount * barMax
        val wOther = other.toDouble / maxCount * barMax
        text(PanelLeft + 56, by + 9, label, size = 9, fill = Muted, anchor = "end")
        rect(PanelLeft + 60, by, wOk, 10, c)
        rect(PanelLeft + 60 + wOk, by, wOther, 10, c, """ fill-opacity="0.35"""")
        text(PanelLeft + 64 + wOk + wOther, by + 9, (ok + other).toString, size = 9)
      }
    }
    val noteY = rowTop + servers.size * rowH + 14
    rect(PanelLeft, noteY - 9, 12, 10, Palette.head)
    text(PanelLeft + 16, noteY, "answered 200", size = 10)
    rect(PanelLeft + 100, noteY - 9, 12, 10, Palette.head, """ fill-opacity="0.35"""")
    text(PanelLeft + 116, noteY, "404 / other", size = 10)
    text(PanelLeft, noteY + 18, f"stock: ${baseline.requests} requests, ${baseline.perPod}%.2f per pod,", size = 10)
    text(PanelLeft, noteY + 31, s"${baseline.code(404)} answered 404", size = 10)
    text(PanelLeft, noteY + 47, f"podsweep: ${p.requests} requests, ${p.stored.size.toDouble / p.pods}%.2f per pod,", size = 10)
    text(PanelLeft, noteY + 60, s"${p.code(404)} answered 404", size = 10)

    // Footer: the facts in words.
    var fy = footerY
    def footer(s: String, fill: String = Ink): Unit = { text(PlotLeft - 90, fy, s, fill = fill); fy += 17 }
    footer(f"podsweep phase: ${p.requests} DELETE requests for ${p.pods} pods (${p.stored.size.toDouble / p.pods}%.2f per pod), " +
      s"leaked ${p.leaked}, wrongful ${p.wrongful}, decoys lost ${p.decoysMissing}, WARN/ERROR lines ${p.loudLines}; " +
      s"DELETEs by server: ${servers.map(s => s"$s ${p.byServer.getOrElse(s, 0)}").mkString(", ")}")
    footer(f"baseline phase ($stock, each server on its own): ${baseline.requests} DELETE requests " +
      f"(${baseline.perPod}%.2f per pod), ${baseline.code(404)} answered 404, WARN/ERROR lines ${baseline.loudLines}")
    p.failover.foreach { f =>
      footer(f"failover: ${f.stopped} was stopped by ${f.how} (podsweep's close() releases leadership at once) " +
        f"at ${(f.stopAtMillis - t0) / 1000.0}%.2f s; the stop took ${f.closedAtMillis - f.stopAtMillis} ms", FailoverRed)
      footer("handover, times from the stop (\"seen leading\" = the first 2-ms poll that saw isLeader, so the first DELETE can come a little earlier):", FailoverRed)
      f.successors.foreach { x =>
        def ms(at: Option[Long]): String = at.map(a => s"${a - f.stopAtMillis} ms").getOrElse("never")
        footer(s"    ${x.scope} -> ${x.server.getOrElse("nobody")}: seen leading after ${ms(x.leadingAtMillis)}, " +
          s"first DELETE after ${ms(x.firstDeleteAtMillis)}", FailoverRed)
      }
    }
    footer("Leader lanes: one sample of every server's isLeader per 100 ms (a sub-100 ms handover does not show as grey). " +
      s"DELETEs: every request $apiServer recorded, per 1-s bucket.", Muted)
    el("</svg>")
    b.toString
  }
}
