# scripts/lib/kyuubi-port.bash: the `port` verb of scripts/kyuubi (sourced by it; uses its
# variables and functions: KYUUBI_VERSION, TARBALL, KYUUBI_SHA256, PATCH, write_diff, log, die).
#
# port: writes java/kyuubi/kyuubi-<version>-podsweep.diff for an earlier Kyuubi release from the
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
# 1.10.3 is refused: its KubernetesApplicationOperation differs from 1.12.0's where the hooks sit
# (docs/kyuubi-versions.md says what a 1.10.3 patch needs).

kyuubi_port() {
  local source="$here/java/kyuubi/kyuubi-1.12.0-podsweep.diff"
  case "$KYUUBI_VERSION" in
    1.12.0) die "port makes the diff of an earlier release from the 1.12.0 diff; KYUUBI_VERSION=1.11.1 scripts/kyuubi port" ;;
    1.10.3) die "Kyuubi 1.10.3's KubernetesApplicationOperation is not 1.12.0's (markApplicationTerminated, the informers, ApplicationState.isFailed): the 1.12.0 diff's hooks do not port mechanically; see docs/kyuubi-versions.md" ;;
  esac
  [ -f "$source" ] || die "no $source"
  [ -f "$TARBALL" ] || die "no tarball at $TARBALL (set KYUUBI_SRC_TARBALL)"
  [ "$(sha256sum "$TARBALL" | cut -d' ' -f1)" = "$KYUUBI_SHA256" ] || die "$TARBALL: sha256 mismatch (tag v$KYUUBI_VERSION expected)"
  local work; work="$(mktemp -d)"
  mkdir -p "$work/a" "$work/b"
  tar xzf "$TARBALL" -C "$work/a" --strip-components=1
  cp -r "$work/a/." "$work/b/"
  log "applying $(basename "$source") to Kyuubi $KYUUBI_VERSION"
  (cd "$work/b" && patch -p1 --forward --no-backup-if-mismatch -r - < "$source" >&2) \
    || die "the 1.12.0 diff does not apply to Kyuubi $KYUUBI_VERSION (a hunk was rejected; see above)"
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
    echo "\`KYUUBI_VERSION=$KYUUBI_VERSION scripts/kyuubi port\` (its hooks land on the same lines: Kyuubi $KYUUBI_VERSION's"
    echo "KubernetesApplicationOperation is 1.12.0's file); PodsweepConf uses .serverOnly (ConfigBuilder has no"
    echo "audience before 1.12) and names $KYUUBI_VERSION as its keys' version. The rest as in the 1.12.0 diff:"
    echo
    sed -e "s/patch -p1 < kyuubi-1\.12\.0-podsweep\.diff/patch -p1 < kyuubi-$KYUUBI_VERSION-podsweep.diff/" \
      -e '/^diff -ruN /,$d' "$source"
    sed -n '/^diff -ruN /,$p' "$source"
  } > "$header"
  write_diff "$work/a" "$work/b" "$PATCH" "$header"
  rm -rf "$work"
  log "wrote $PATCH ($(grep -c '^diff -ruN ' "$PATCH") files)"
  echo "$PATCH"
}
