# scripts/lib/kyuubi-port.bash: the `port` verb of scripts/kyuubi (sourced by it; uses its
# variables and functions: KYUUBI_VERSION, TARBALL, KYUUBI_SHA256, PATCH, write_diff, log, die).
#
# port [--check]: writes java/kyuubi/kyuubi-<version>-podsweep.diff (--check: only says whether the
# committed one is what it would write, exit 1 if not) for an earlier Kyuubi release from the
# 1.12.0 diff (the source of truth; its bytes are never changed here): the 1.12.0 diff applied to
# that release's tarball (hunks may land at an offset; a rejected hunk stops the port), then what
# differs between the releases adapted in the patched tree, and the diff written from the two
# trees with the 1.12.0 diff's file list:
#   - PodsweepConf.scala (generated for 1.12.0 by `podsweep --list-keys scala`): 1.12.0's
#     `.audience(SERVER)` is `.serverOnly` before 1.12 (ConfigBuilder has no audience and no
#     ConfigAudience), and each key's `.version` is the release the patch targets;
#   - docs/configuration/settings.md and docs/monitor/metrics.md: the version column of the rows
#     the diff adds names that release (the columns keep their width: the versions are as long);
#   - the header names the release and the 1.12.0 diff it is ported from.
# settings.md stays what Kyuubi's generator writes only as long as the release's table around
# podsweep's rows is the 1.12.0 one's; `KYUUBI_VERSION=<v> scripts/kyuubi gates` checks it
# (AllKyuubiConfiguration) on a full test tree.
# 1.10.3: its KubernetesApplicationOperation is not 1.12.0's file, but the six hooks' lines are
# there (one hunk's context line, the COMPLETED case, reads `isFailed(notification.getValue)` in
# 1.10.3: patch's fuzz takes it); the two documentation pages differ around podsweep's rows, so
# they are not patched but rebuilt: settings.md's Kubernetes table is the 1.12.0 diff's new table
# without the one key 1.10.3 lacks (kyuubi.kubernetes.spark.autoCreateFileUploadPath.enabled) and
# with 1.10.3's own text of a row that differs (appUrlPattern's doc, without {{SPARK_DRIVER_POD_IP}})
# padded to the table's widths; every other row of 1.10.3's table must be in it, or the port
# stops. metrics.md gets the diff's new section at the end of the operation metrics, where 1.12.0
# has it.

kyuubi_port() {
  local source="$here/java/kyuubi/kyuubi-1.12.0-podsweep.diff"
  case "$KYUUBI_VERSION" in
    1.12.0) die "port makes the diff of an earlier release from the 1.12.0 diff; KYUUBI_VERSION=1.11.1 scripts/kyuubi port" ;;
  esac
  [ -f "$source" ] || die "no $source"
  [ -f "$TARBALL" ] || die "no tarball at $TARBALL (set KYUUBI_SRC_TARBALL)"
  [ "$(sha256sum "$TARBALL" | cut -d' ' -f1)" = "$KYUUBI_SHA256" ] || die "$TARBALL: sha256 mismatch (tag v$KYUUBI_VERSION expected)"
  local work; work="$(mktemp -d)"
  mkdir -p "$work/a" "$work/b"
  tar xzf "$TARBALL" -C "$work/a" --strip-components=1
  cp -r "$work/a/." "$work/b/"
  log "applying $(basename "$source") to Kyuubi $KYUUBI_VERSION"
  if [ "$KYUUBI_VERSION" = 1.10.3 ]; then
    # Without the two documentation pages, which are rebuilt below.
    (cd "$work/b" && python3 -c '
import re, sys
skip = {"docs/configuration/settings.md", "docs/monitor/metrics.md"}
parts = re.split(r"(?m)^(?=diff -ruN )", open(sys.argv[1]).read())
print("".join(p for p in parts if not (p.startswith("diff -ruN ") and p.split()[2][2:] in skip)), end="")
' "$source" | patch -p1 --forward --no-backup-if-mismatch -r - >&2) \
      || die "the 1.12.0 diff does not apply to Kyuubi $KYUUBI_VERSION (a hunk was rejected; see above)"
    python3 - "$work/b" "$source" <<'PY' || die "rebuilding the documentation pages failed"
import re, sys
root, source = sys.argv[1], sys.argv[2]
text = open(source).read()
def added(path):
    part = re.search(r'(?ms)^diff -ruN a/%s b/%s\n(.*?)(?=^diff -ruN |\Z)' % (re.escape(path), re.escape(path)), text).group(1)
    return [l[1:] for l in part.split('\n') if l.startswith('+') and not l.startswith('+++')]
# settings.md: the Kubernetes table.
table = [l for l in added('docs/configuration/settings.md') if l.startswith('|')]
table = [l for l in table if not l.startswith('| kyuubi.kubernetes.spark.autoCreateFileUploadPath.enabled ')]
p = root + '/docs/configuration/settings.md'
lines = open(p).read().split('\n')
start = lines.index('### Kubernetes')
first = next(i for i in range(start, len(lines)) if lines[i].startswith('|'))
last = first
while last < len(lines) and lines[last].startswith('|'):
    last += 1
norm = lambda l: re.sub(r' +', ' ', l)
def key(l):
    return l.split('|')[1].strip()
ours = {key(l): l for l in lines[first + 2:last]}
# A row of Kyuubi's own whose text differs in this release (1.10.3's appUrlPattern doc lacks
# {{SPARK_DRIVER_POD_IP}}): this release's cells, padded to the new table's column widths.
def refit(template, row):
    widths = [len(c) for c in template.split('|')[1:-1]]
    cells = [c.strip() for c in row.split('|')[1:-1]]
    if len(cells) != len(widths):
        sys.exit('settings.md: cannot refit %s' % key(row))
    return '|' + '|'.join(' ' + c.ljust(w - 2) + ' ' for c, w in zip(cells, widths)) + '|'
table = [refit(l, ours[key(l)]) if key(l) in ours and norm(l) != norm(ours[key(l)]) else l for l in table]
missing = [l for l in lines[first + 2:last] if norm(l) not in {norm(t) for t in table}]
if missing:
    sys.exit('settings.md: rows of this release not in the new table: %s' % missing[:2])
lines[first:last] = table
open(p, 'w').write('\n'.join(lines))
# metrics.md: the new section after the operation metrics list.
section = added('docs/monitor/metrics.md')
p = root + '/docs/monitor/metrics.md'
m = open(p).read()
anchor = '- `kyuubi.operation.failed.ExecuteStatement.${errorType}`\n'
if m.count(anchor) != 1:
    sys.exit('metrics.md: no single anchor line')
m = m.replace(anchor, anchor + '\n' + '\n'.join(section).rstrip('\n') + '\n')
open(p, 'w').write(m)
PY
  else
    (cd "$work/b" && patch -p1 --forward --no-backup-if-mismatch -r - < "$source" >&2) \
      || die "the 1.12.0 diff does not apply to Kyuubi $KYUUBI_VERSION (a hunk was rejected; see above)"
  fi
  python3 - "$work/b" "$KYUUBI_VERSION" <<'PY' || die "adapting the patched tree failed"
import re, sys
root, version = sys.argv[1], sys.argv[2]
def edit(path, fn):
    p = '%s/%s' % (root, path)
    text = open(p).read()
    new = fn(text)
    if new == text:
        sys.exit('port: nothing to adapt in %s' % path)
    open(p, 'w').write(new)
def conf(t):
    t = t.replace('import org.apache.kyuubi.config.ConfigAudience.SERVER\n', '')
    t = t.replace('      .audience(SERVER)\n', '      .serverOnly\n')
    return t.replace('.version("1.12.0")', '.version("%s")' % version)
edit('kyuubi-server/src/main/scala/org/apache/kyuubi/engine/PodsweepConf.scala', conf)
# The rows podsweep adds: their last column before the description (metrics.md) or the last one
# (settings.md) is the version.
def rows(marker):
    def fn(t):
        out = []
        for line in t.split('\n'):
            if marker(line):
                line = line.replace('| 1.12.0 |', '| %s |' % version)
            out.append(line)
        return '\n'.join(out)
    return fn
edit('docs/configuration/settings.md', rows(lambda l: l.startswith('| kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.')
     and '| 1.12.0 |' in l))
edit('docs/monitor/metrics.md', rows(lambda l: l.startswith('| `kyuubi.kubernetes.cleanup.')))
PY
  ! grep -q '\.audience(' "$work/b/kyuubi-server/src/main/scala/org/apache/kyuubi/engine/PodsweepConf.scala" \
    || die "PodsweepConf.scala still uses .audience"
  local header="$work/header.diff"
  {
    echo "podsweep for Apache Kyuubi $KYUUBI_VERSION (tag v$KYUUBI_VERSION): kyuubi-1.12.0-podsweep.diff ported by"
    if [ "$KYUUBI_VERSION" = 1.10.3 ]; then
      echo "\`KYUUBI_VERSION=$KYUUBI_VERSION scripts/kyuubi port\`. Kyuubi 1.10.3's KubernetesApplicationOperation is not"
      echo "1.12.0's file, but the hooks sit on the same lines (the COMPLETED case reads isFailed(state) there);"
      echo "docs/configuration/settings.md's Kubernetes table and docs/monitor/metrics.md's new section are"
      echo "rebuilt for 1.10.3's pages. PodsweepConf uses .serverOnly (ConfigBuilder has no audience before"
      echo "1.12) and names $KYUUBI_VERSION as its keys' version. The rest as in the 1.12.0 diff:"
    else
      echo "\`KYUUBI_VERSION=$KYUUBI_VERSION scripts/kyuubi port\` (its hooks land on the same lines: Kyuubi $KYUUBI_VERSION's"
      echo "KubernetesApplicationOperation is 1.12.0's file); PodsweepConf uses .serverOnly (ConfigBuilder has no"
      echo "audience before 1.12) and names $KYUUBI_VERSION as its keys' version. The rest as in the 1.12.0 diff:"
    fi
    echo
    sed -e "s/patch -p1 < kyuubi-1\.12\.0-podsweep\.diff/patch -p1 < kyuubi-$KYUUBI_VERSION-podsweep.diff/" \
      -e '/^diff -ruN /,$d' "$source"
    sed -n '/^diff -ruN /,$p' "$source"
  } > "$header"
  if [ "${1:-}" = --check ]; then
    # Whether the committed diff is what the port writes now (after a change to the 1.12.0 diff
    # it is not, until `port` runs).
    write_diff "$work/a" "$work/b" "$work/ported.diff" "$header"
    if cmp -s "$work/ported.diff" "$PATCH"; then
      rm -rf "$work"; echo "ok    $(basename "$PATCH") is the port of kyuubi-1.12.0-podsweep.diff"; return 0
    fi
    rm -rf "$work"
    echo "STALE $(basename "$PATCH"): not the port of kyuubi-1.12.0-podsweep.diff; run KYUUBI_VERSION=$KYUUBI_VERSION scripts/kyuubi port"
    return 1
  fi
  write_diff "$work/a" "$work/b" "$PATCH" "$header"
  rm -rf "$work"
  log "wrote $PATCH ($(grep -c '^diff -ruN ' "$PATCH") files)"
  echo "$PATCH"
}
