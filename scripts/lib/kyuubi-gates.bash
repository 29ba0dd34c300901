# scripts/lib/kyuubi-gates.bash: the `gates` and `regen` verbs of scripts/kyuubi (sourced by it;
# uses its variables and functions: CACHE, SUITES, TEST_PATCH, run_suite, prepare_test_trees...).
#
# gates: Kyuubi's own checks on the patched tree (the `test` verb's patched-<key>/ tree: the
# tarball, the served test dependencies, our diff; for spotless and rat a tree of the tarball and
# the diff alone), each run as Kyuubi runs it, one line each:
#   gate scalastyle: Kyuubi's scalastyle-config.xml on kyuubi-server's main and test sources;
#   gate spotless: spotless:check of the root (docs/**/*.md, */README.md, pom.xml: flexmark and
#     sortPom) and of kyuubi-server (scalafmt with Kyuubi's .scalafmt.conf, google-java-format, pom);
#   gate apache-rat: apache-rat:check of the whole tree with Kyuubi's .rat-excludes;
#   gate AllKyuubiConfiguration: the suite that compares docs/configuration/settings.md with what
#     Kyuubi's generator writes from the registered entries (PodsweepConf among them);
#   gate KubernetesApplicationOperationSuite: the suite with the diff's cases, podsweep's platform
#     jar (the Java API and the native library) first on the test class path.
# Then "kyuubi gates: N of 5 passed"; exit 1 when one fails (its log is named).
#
# regen: rewrites the diff's generated parts in place: PodsweepConf.scala from podsweep's key
# table (`podsweep --list-keys scala`) and docs/configuration/settings.md as Kyuubi's generator
# writes it (AllKyuubiConfiguration with KYUUBI_UPDATE=1 on a patched test tree), keeping the
# diff's header and its list of files.

GATES="$CACHE/gates"

# The platform jar the KAO suite needs: $PODSWEEP_PLATFORM_JAR, else one made here from
# `cargo build --lib` (target/debug/libpodsweep.so at native/linux/<arch>/libpodsweep.so), the
# Java API classes `patched` compiled and org/podsweep/build-info.properties with the version and
# commit the library carries (NativeLoader compares them). Prints its path.
gates_platform_jar() {
  if [ -n "${PODSWEEP_PLATFORM_JAR:-}" ]; then
    [ -s "$PODSWEEP_PLATFORM_JAR" ] || die "PODSWEEP_PLATFORM_JAR=$PODSWEEP_PLATFORM_JAR: no such jar"
    echo "$PODSWEEP_PLATFORM_JAR"; return
  fi
  local arch
  case "$(uname -m)" in
    x86_64|amd64) arch=x86_64 ;;
    aarch64|arm64) arch=aarch64 ;;
    *) die "podsweep has no native library for $(uname -m)" ;;
  esac
  log "cargo build --lib (podsweep's native library for the KAO suite)"
  (cd "$here" && nice -n 10 cargo build --lib >&2) || die "cargo build --lib failed"
  local so="$here/target/debug/libpodsweep.so" line version commit
  line="$(grep -a -o 'podsweep-build-info version=[^ ]* commit=[0-9A-Za-z._-]*' "$so" | head -n 1)"
  [ -n "$line" ] || die "$so carries no podsweep-build-info line"
  version="$(sed 's/.*version=\([^ ]*\).*/\1/' <<<"$line")"
  commit="$(sed 's/.*commit=//' <<<"$line")"
  local dir="$GATES/platform" jar="$GATES/podsweep-$version-linux-$arch-test.jar"
  rm -rf "$dir" && mkdir -p "$dir/native/linux/$arch" "$dir/org/podsweep"
  cp -r "$CACHE/podsweep-api/classes/." "$dir/"
  printf 'version=%s\ncommit=%s\n' "$version" "$commit" > "$dir/org/podsweep/build-info.properties"
  # Without its debug sections (a debug build's are most of its 200 MB): each JVM extracts it.
  if command -v strip >/dev/null 2>&1; then
    strip --strip-debug -o "$dir/native/linux/$arch/libpodsweep.so" "$so"
  else
    cp "$so" "$dir/native/linux/$arch/libpodsweep.so"
  fi
  (cd "$dir" && jar --create --file "$jar" .) || die "jar of $dir failed"
  echo "$jar"
}

# Counts of one Maven run's log for the line a gate prints.
gate_scalastyle_counts() {
  local log="$1" files errors warnings
  files="$(sed -n 's/.*Processed \([0-9]*\) file(s).*/\1/p' "$log" | awk '{s+=$1} END {print s}')"
  errors="$(sed -n 's/.*Found \([0-9]*\) errors.*/\1/p' "$log" | awk '{s+=$1} END {print s}')"
  warnings="$(sed -n 's/.*Found \([0-9]*\) warnings.*/\1/p' "$log" | awk '{s+=$1} END {print s}')"
  echo "${files:-0} files, ${errors:-?} errors, ${warnings:-?} warnings"
}

# The files spotless reads in the modules it runs on (its includes in Kyuubi's root pom).
gate_spotless_counts() {
  local tree="$1" scala java md poms
  scala="$(find "$tree/kyuubi-server/src" -name '*.scala' | wc -l)"
  java="$(find "$tree/kyuubi-server/src" -name '*.java' | wc -l)"
  md="$( (cd "$tree" && { find docs -name '*.md' -not -path 'docs/*/lib/python*'; ls -1 */README.md 2>/dev/null; }) | wc -l)"
  poms=2
  echo "$scala Scala, $java Java, $md Markdown files, $poms poms"
}

gate_rat_counts() {
  local report="$1/target/rat.txt" approved unknown
  [ -f "$report" ] || { echo "no report"; return; }
  approved="$(sed -n 's/^ *Apache Licensed: *\([0-9]*\).*/\1/p' "$report" | head -n 1)"
  unknown="$(sed -n 's/^ *\([0-9]*\) Unknown Licenses.*/\1/p' "$report" | head -n 1)"
  echo "${approved:-?} files with the Apache License header, ${unknown:-?} unknown"
}

# The counts of one suite run (JUnit XML under $2/junit) as "P passed, F failed, I ignored".
gate_suite_counts() {
  python3 - "$1" "$2" <<'PY'
import os, sys
import xml.etree.ElementTree as ET
suite, d = sys.argv[1], sys.argv[2]
xml = os.path.join(d, 'junit', 'TEST-%s.xml' % suite)
p = f = i = 0
if os.path.exists(xml):
    for case in ET.parse(xml).getroot().iter('testcase'):
        kids = {c.tag for c in case}
        if kids & {'failure', 'error'}: f += 1
        elif 'skipped' in kids: i += 1
        else: p += 1
print('%d passed, %d failed, %d ignored' % (p, f, i))
sys.exit(0 if p > 0 and f == 0 else 1)
PY
}

# Runs one Maven gate in tree $1 (the rest: Maven's arguments); its log goes to $GATES/results.
maven_gate() {
  local tree="$1" name="$2"; shift 2
  (cd "$tree" && nice -n 5 mvn -B -s "$CACHE/settings.xml" -Denforcer.skip=true "$@") \
    > "$GATES/results/$name.log" 2>&1
}

kyuubi_gates() {
  local t0=$SECONDS
  command -v mvn >/dev/null 2>&1 || die "Maven (mvn) is needed for Kyuubi's gates"
  prepare_test_trees
  local tree="$PATCHED_TREE" res="$GATES/results" passed=0 rc
  rm -rf "$res" && mkdir -p "$res"
  local jar; jar="$(gates_platform_jar)"
  # spotless and rat read the sources as the diff leaves them: a tree of the tarball and the diff
  # alone (the test tree's poms lose the test dependencies the registry does not serve, and it
  # holds build output). scalastyle resolves kyuubi-server's test class path: the test tree.
  local pristine="$GATES/pristine"
  rm -rf "$pristine" && mkdir -p "$pristine"
  tar xzf "$TARBALL" -C "$pristine" --strip-components=1
  (cd "$pristine" && patch -p1 --forward --quiet < "$TEST_PATCH") || die "the diff does not apply to Kyuubi $KYUUBI_VERSION"
  log "gates on $tree and $pristine (logs: $res)"

  local g line
  for g in scalastyle spotless apache-rat; do
    local t1=$SECONDS
    rc=0
    case "$g" in
      scalastyle) maven_gate "$tree" "$g" -pl kyuubi-server scalastyle:check || rc=$?
        line="$(gate_scalastyle_counts "$res/$g.log")" ;;
      spotless) maven_gate "$pristine" "$g" -pl .,kyuubi-server spotless:check || rc=$?
        line="$(gate_spotless_counts "$pristine") checked" ;;
      apache-rat) maven_gate "$pristine" "$g" -N apache-rat:check || rc=$?
        line="$(gate_rat_counts "$pristine")" ;;
    esac
    if [ "$rc" -eq 0 ]; then passed=$((passed + 1)); echo "gate $g: ok, $line ($((SECONDS - t1)) s)"
    else echo "gate $g: FAILED, $line (see $res/$g.log)"; fi
  done

  local suite short
  for suite in org.apache.kyuubi.config.AllKyuubiConfiguration \
    org.apache.kyuubi.engine.KubernetesApplicationOperationSuite; do
    short="${suite##*.}"
    local t1=$SECONDS
    run_suite "$tree" "$suite" "$res" "$jar"
    rc=0; line="$(gate_suite_counts "$suite" "$res")" || rc=$?
    if [ "$short" = KubernetesApplicationOperationSuite ]; then
      local per; per="$(cat "$res/$short.log" "$res/$short.unit-tests.log" 2>/dev/null \
        | grep -o 'podsweep-deletes: .*' | head -n 1 | sed 's/^podsweep-deletes: //' || true)"
      line="$line${per:+; $per}"
    fi
    if [ "$rc" -eq 0 ]; then passed=$((passed + 1)); echo "gate $short: ok, $line ($((SECONDS - t1)) s)"
    else echo "gate $short: FAILED, $line (see $res/$short.log)"; fi
  done
  echo "kyuubi gates: $passed of 5 passed ($((SECONDS - t0)) s)"
  [ "$passed" -eq 5 ]
}

# ---- regen: the diff's generated parts --------------------------------------------------------

# Writes the diff from trees $1 (a: the tarball) and $2 (b: a + edits) to $3, with the header (the
# text before the first file) and the file list of the diff $4, plus the files named after it (in
# path order); a file without changes is left out.
write_diff() {
  local a="$1" b="$2" out="$3" old="$4"; shift 4
  python3 - "$a" "$b" "$out" "$old" "$@" <<'PY'
import re, subprocess, sys
a, b, out, old = sys.argv[1:5]
text = open(old).read()
header = text[:text.index('\ndiff -ruN ') + 1]
files = sorted(set(re.findall(r'^diff -ruN a/(\S+) b/', text, re.M)) | set(sys.argv[5:]))
parts = [header]
for f in files:
    r = subprocess.run(['diff', '-uN', '--label', 'a/' + f, '--label', 'b/' + f,
                        '%s/%s' % (a, f), '%s/%s' % (b, f)], capture_output=True, text=True)
    if r.returncode > 1:
        sys.exit('diff %s: %s' % (f, r.stderr))
    if r.stdout:
        parts.append('diff -ruN a/%s b/%s\n' % (f, f) + r.stdout)
open(out, 'w').write(''.join(parts))
PY
}

kyuubi_regen() {
  local t0=$SECONDS work="$GATES/regen"
  command -v mvn >/dev/null 2>&1 || die "Maven (mvn) is needed to run Kyuubi's settings generator"
  rm -rf "$work" && mkdir -p "$work/a" "$work/b"
  tar xzf "$TARBALL" -C "$work/a" --strip-components=1
  cp -r "$work/a/." "$work/b/"
  (cd "$work/b" && patch -p1 --forward --quiet < "$PATCH") || die "the diff does not apply to Kyuubi $KYUUBI_VERSION"
  log "PodsweepConf.scala from podsweep's key table (podsweep --list-keys scala)"
  local conf="$work/b/kyuubi-server/src/main/scala/org/apache/kyuubi/engine/PodsweepConf.scala"
  (cd "$here" && nice -n 10 cargo run -q --bin podsweep -- --list-keys scala) > "$work/PodsweepConf.scala" \
    || die "podsweep --list-keys scala failed"
  cp "$work/PodsweepConf.scala" "$conf"
  write_diff "$work/a" "$work/b" "$work/step1.diff" "$PATCH"
  # Kyuubi's generator (AllKyuubiConfiguration, KYUUBI_UPDATE=1) on the patched test tree of that
  # diff; the tree then holds the final diff exactly and is kept under the final diff's key.
  local diff="$PATCH"
  TEST_PATCH="$work/step1.diff" PATCH="$work/step1.diff"
  prepare_test_trees
  PATCH="$diff"
  local suite=org.apache.kyuubi.config.AllKyuubiConfiguration
  log "AllKyuubiConfiguration with KYUUBI_UPDATE=1 on $PATCHED_TREE"
  KYUUBI_UPDATE=1 run_suite "$PATCHED_TREE" "$suite" "$work/results"
  gate_suite_counts "$suite" "$work/results" >/dev/null || die "AllKyuubiConfiguration failed (see $work/results)"
  cp "$PATCHED_TREE/docs/configuration/settings.md" "$work/b/docs/configuration/settings.md"
  write_diff "$work/a" "$work/b" "$work/final.diff" "$PATCH" docs/configuration/settings.md
  local key dir
  key="$(patched_tree_key "$work/final.diff" "$API_JAR")"
  dir="$(patched_tree_dir "$key")"
  if [ "$dir" != "$PATCHED_TREE" ]; then
    rm -rf "$dir" && mv "$PATCHED_TREE" "$dir" && echo "$key" > "$dir/stamp"
  fi
  # The patched jar is the same (settings.md is no source of it): kept under the final diff's key.
  local jar_old jar_new want
  jar_old="$CACHE/patched/$(patched_want "$work/step1.diff" | sha256sum | cut -c1-16)"
  want="$(patched_want "$work/final.diff")"
  jar_new="$CACHE/patched/$(echo "$want" | sha256sum | cut -c1-16)"
  if [ -s "$jar_old/kyuubi-server.jar" ] && [ "$jar_old" != "$jar_new" ]; then
    rm -rf "$jar_new" && cp -r "$jar_old" "$jar_new" && echo "$want" > "$jar_new/stamp"
    record_patched "$jar_new/kyuubi-server.jar"
  fi
  cp "$work/final.diff" "$PATCH"
  log "regenerated $(basename "$PATCH") in $((SECONDS - t0)) s"
  echo "$PATCH"
}
