# scripts/lib/matrix-ha.bash: the HA servers of the compatibility matrix (sourced by scripts/matrix).
# Each NAME is a server version podsweep elects through; tools_NAME fetches or builds it into
# $TOOLS (skipped when present) and ha_start NAME DIR starts it on a free loopback port, writing
# DIR/ha.pid and setting HA_KIND (zookeeper|etcd), HA_ADDRESS (127.0.0.1:port) and HA_VERSION (what
# the running server says it is). ha_stop DIR stops it by that PID.
#   zookeeper-3.4  Kyuubi's embedded ZooKeeper: the 3.4.14 server relocated into Kyuubi's
#                  kyuubi-relocated-zookeeper-34 jar (the jar Kyuubi 1.12.0's EmbeddedZookeeper runs),
#                  from Kyuubi 1.12.0's runtime class path (scripts/kyuubi)
#   zookeeper-3.8  Debian's zookeeper package (/usr/share/java), as tests/common/zk.rs runs it
#   zookeeper-3.9  org.apache.zookeeper:zookeeper $ZK39_VERSION and its runtime dependencies from the
#                  Maven registry, into $TOOLS/zookeeper-$ZK39_VERSION/lib
#   etcd-3.4       Debian's etcd-server (/usr/bin/etcd)
#   etcd-3.6       go.etcd.io/etcd/server/v3 $ETCD36_VERSION built from a scratch module into
#                  $TOOLS/etcd-$ETCD36_VERSION/etcd
# Every ZooKeeper runs ZooKeeperServerMain with one config file (tick 500 ms, sessions 1-60 s).

HA_NAMES=(zookeeper-3.4 zookeeper-3.8 zookeeper-3.9 etcd-3.4 etcd-3.6)
ZK39_VERSION="${ZK39_VERSION:-3.9.5}"
ETCD36_VERSION="${ETCD36_VERSION:-3.6.16}"

ha_log() { printf '[matrix] %s\n' "$*" >&2; }

# One JSON line per tool: what it is, where, how long it took to get and how big it is.
tool_line() { # NAME VERSION PATH SECONDS(or -1: already there)
  printf '{"matrix":"tool","tool":"%s","version":"%s","path":"%s","seconds":%s,"mb":%s}\n' \
    "$1" "$2" "$3" "$4" "$(du -sm "$3" | cut -f1)"
}

kyuubi_runtime() { # the Kyuubi 1.12.0 runtime class path file scripts/kyuubi writes
  local f="$TOOLS/kyuubi-1.12.0/runtime-classpath.txt"
  [ -s "$f" ] || { ha_log "no $f: scripts/kyuubi sets up Kyuubi 1.12.0"; return 1; }
  echo "$f"
}

zk_classpath() { # NAME
  case "$1" in
    zookeeper-3.4)
      local f; f="$(kyuubi_runtime)" || return 1
      grep -E '/kyuubi-relocated-zookeeper-34-[^/]*\.jar$|/slf4j-api-[^/]*\.jar$' "$f" | paste -sd: ;;
    zookeeper-3.8)
      local j cp=()
      for j in zookeeper zookeeper-jute slf4j-api slf4j-nop netty-handler netty-transport netty-transport-native-epoll \
        netty-transport-native-unix-common netty-buffer netty-codec netty-resolver netty-common metrics-core \
        snappy-java commons-cli commons-io; do
        [ -f "/usr/share/java/$j.jar" ] && cp+=("/usr/share/java/$j.jar")
      done
      [ -f /usr/share/java/zookeeper.jar ] || { ha_log "no /usr/share/java/zookeeper.jar (apt-get install zookeeper)"; return 1; }
      (IFS=:; echo "${cp[*]}") ;;
    zookeeper-3.9)
      local d="$TOOLS/zookeeper-$ZK39_VERSION/lib"
      ls "$d"/zookeeper-"$ZK39_VERSION".jar >/dev/null 2>&1 || { ha_log "zookeeper $ZK39_VERSION not fetched (scripts/matrix tools zookeeper-3.9)"; return 1; }
      ls "$d"/*.jar | paste -sd: ;;
  esac
}

zk_main() { # NAME
  case "$1" in
    zookeeper-3.4) echo org.apache.kyuubi.shaded.zookeeper.server.ZooKeeperServerMain ;;
    *) echo org.apache.zookeeper.server.ZooKeeperServerMain ;;
  esac
}

tools_zookeeper-3.4() { local f; f="$(kyuubi_runtime)" || return 1; local j; j="$(grep -E '/kyuubi-relocated-zookeeper-34-[^/]*\.jar$' "$f")"
  [ -s "$j" ] || { ha_log "Kyuubi's runtime class path has no kyuubi-relocated-zookeeper-34 jar"; return 1; }
  tool_line zookeeper-3.4 "3.4.14 (kyuubi-relocated-zookeeper-34 $(basename "$(dirname "$j")"))" "$j" -1; }
tools_zookeeper-3.8() { zk_classpath zookeeper-3.8 >/dev/null || return 1
  tool_line zookeeper-3.8 "$(dpkg-query -W -f '${Version}' zookeeper 2>/dev/null || echo debian)" /usr/share/java/zookeeper.jar -1; }
tools_etcd-3.4() { [ -x /usr/bin/etcd ] || { ha_log "no /usr/bin/etcd (apt-get install etcd-server)"; return 1; }
  tool_line etcd-3.4 "$(/usr/bin/etcd --version | sed -n 's/^etcd Version: //p')" /usr/bin/etcd -1; }

tools_zookeeper-3.9() {
  local d="$TOOLS/zookeeper-$ZK39_VERSION"
  if ls "$d/lib/zookeeper-$ZK39_VERSION.jar" >/dev/null 2>&1; then tool_line zookeeper-3.9 "$ZK39_VERSION" "$d" -1; return; fi
  command -v mvn >/dev/null 2>&1 || { ha_log "zookeeper-3.9 needs Maven (mvn)"; return 1; }
  local start scratch; start=$(date +%s); scratch="$(mktemp -d)"
  cat > "$scratch/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>podsweep.local</groupId><artifactId>zookeeper-server</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.zookeeper</groupId><artifactId>zookeeper</artifactId><version>$ZK39_VERSION</version></dependency>
@EXTRA@
  </dependencies>
</project>
POM
  ha_log "fetching org.apache.zookeeper:zookeeper:$ZK39_VERSION and its runtime dependencies (Maven)"
  # The server also needs what its POM marks "provided" (metrics-core, snappy-java, commons-cli), at
  # the versions its parent POM pins: read from that POM once the first resolution fetched it.
  local parent extra='' spec g a prop v
  (cd "$scratch" && sed -i 's/@EXTRA@//' pom.xml && mvn -B -q dependency:resolve >&2) \
    || { rm -rf "$scratch"; ha_log "fetching zookeeper $ZK39_VERSION failed"; return 1; }
  parent="${MAVEN_REPO:-$HOME/.m2/repository}/org/apache/zookeeper/parent/$ZK39_VERSION/parent-$ZK39_VERSION.pom"
  for spec in io.dropwizard.metrics:metrics-core:dropwizard.version org.xerial.snappy:snappy-java:snappy.version \
    commons-cli:commons-cli:commons-cli.version; do
    IFS=: read -r g a prop <<<"$spec"
    v="$(sed -n "s#.*<$prop>\([^<]*\)</$prop>.*#\1#p" "$parent" | head -1)"
    [ -n "$v" ] || { rm -rf "$scratch"; ha_log "no $prop in $parent"; return 1; }
    extra+="<dependency><groupId>$g</groupId><artifactId>$a</artifactId><version>$v</version></dependency>"
  done
  sed -i "s#</dependencies>#$extra</dependencies>#" "$scratch/pom.xml"
  (cd "$scratch" && mvn -B -q dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$scratch/lib" >&2) \
    || { rm -rf "$scratch"; ha_log "fetching zookeeper $ZK39_VERSION failed"; return 1; }
  mkdir -p "$d"; rm -rf "$d/lib"; mv "$scratch/lib" "$d/lib"; rm -rf "$scratch"
  tool_line zookeeper-3.9 "$ZK39_VERSION" "$d" "$(( $(date +%s) - start ))"
}

# etcd's server module is its main package: a scratch module requiring it builds the etcd binary.
tools_etcd-3.6() {
  local d="$TOOLS/etcd-$ETCD36_VERSION"
  if [ -x "$d/etcd" ] && "$d/etcd" --version 2>/dev/null | grep -q "etcd Version: $ETCD36_VERSION"; then
    tool_line etcd-3.6 "$ETCD36_VERSION" "$d/etcd" -1; return; fi
  command -v go >/dev/null 2>&1 || { ha_log "etcd-3.6 needs Go"; return 1; }
  local start scratch; start=$(date +%s); scratch="$(mktemp -d)"
  ha_log "building etcd $ETCD36_VERSION from go.etcd.io/etcd/server/v3 (scratch: $scratch)"
  (
    cd "$scratch" && export GOFLAGS=-mod=mod GOTOOLCHAIN=local
    go mod init podsweep.local/etcd-build >/dev/null 2>&1 || exit 1
    go mod edit -require "go.etcd.io/etcd/server/v3@v$ETCD36_VERSION" || exit 1
    local gomod need have
    gomod="$(go mod download -json "go.etcd.io/etcd/server/v3@v$ETCD36_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
    need="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod" | head -1)"; have="$(go env GOVERSION | sed 's/^go//')"
    if [ -n "$need" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | tail -1)" != "$have" ]; then export GOTOOLCHAIN="go$need"; fi
    printf 'package main\n\nimport _ "go.etcd.io/etcd/server/v3"\n\nfunc main() {}\n' > tools.go
    go mod tidy >&2 || exit 1
    nice -n 10 go build -trimpath -ldflags "-s -w" -o etcd go.etcd.io/etcd/server/v3 >&2 || exit 1
  ) || { rm -rf "$scratch"; ha_log "building etcd $ETCD36_VERSION failed"; return 1; }
  mkdir -p "$d"; mv "$scratch/etcd" "$d/etcd.tmp" && mv "$d/etcd.tmp" "$d/etcd"; rm -rf "$scratch"
  tool_line etcd-3.6 "$ETCD36_VERSION" "$d/etcd" "$(( $(date +%s) - start ))"
}

ha_free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

zk_srvr() { # PORT: the srvr four-letter word's answer (empty when not serving)
  timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/'"$1"' && printf srvr >&3 && cat <&3' 2>/dev/null || true
}

ha_start() { # NAME DIR
  local name="$1" dir="$2" port
  mkdir -p "$dir"; port="$(ha_free_port)"
  HA_ADDRESS="127.0.0.1:$port"
  case "$name" in
    zookeeper-*)
      HA_KIND=zookeeper
      local cp; cp="$(zk_classpath "$name")" || return 1
      mkdir -p "$dir/zk-data"
      printf 'tickTime=500\nminSessionTimeout=1000\nmaxSessionTimeout=60000\ndataDir=%s\nclientPort=%s\nclientPortAddress=127.0.0.1\n4lw.commands.whitelist=*\nadmin.enableServer=false\nmaxClientCnxns=0\n' \
        "$dir/zk-data" "$port" > "$dir/zoo.cfg"
      setsid java -Xmx256m -Dzookeeper.admin.enableServer=false -Dzookeeper.jmx.log4j.disable=true -Djava.net.preferIPv4Stack=true \
        -cp "$cp" "$(zk_main "$name")" "$dir/zoo.cfg" > "$dir/ha.log" 2>&1 < /dev/null &
      echo $! > "$dir/ha.pid"
      local i out=
      for i in $(seq 150); do
        out="$(zk_srvr "$port")"; [[ "$out" == *"Zookeeper version: "* ]] && break; out=
        kill -0 "$(cat "$dir/ha.pid")" 2>/dev/null || { tail -20 "$dir/ha.log" >&2; ha_log "$name exited"; return 1; }
        sleep 0.2
      done
      [ -n "$out" ] || { ha_stop "$dir"; ha_log "$name not serving after 30 s (log $dir/ha.log)"; return 1; }
      HA_VERSION="$(printf '%s\n' "$out" | sed -n 's/^Zookeeper version: \([^-,]*\).*/\1/p')" ;;
    etcd-*)
      HA_KIND=etcd
      local bin peer
      case "$name" in etcd-3.4) bin=/usr/bin/etcd ;; *) bin="$TOOLS/etcd-$ETCD36_VERSION/etcd" ;; esac
      [ -x "$bin" ] || { ha_log "$name: no $bin (scripts/matrix tools $name)"; return 1; }
      peer="$(ha_free_port)"
      setsid "$bin" --name matrix --data-dir "$dir/etcd-data" \
        --listen-client-urls "http://$HA_ADDRESS" --advertise-client-urls "http://$HA_ADDRESS" \
        --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
        --initial-cluster "matrix=http://127.0.0.1:$peer" --heartbeat-interval 50 --election-timeout 500 \
        --log-level error > "$dir/ha.log" 2>&1 < /dev/null &
      echo $! > "$dir/ha.pid"
      local i v=
      for i in $(seq 150); do
        v="$(curl -s --max-time 1 "http://$HA_ADDRESS/version" | sed -n 's/.*"etcdserver":"\([^"]*\)".*/\1/p')"
        [ -n "$v" ] && curl -s --max-time 1 "http://$HA_ADDRESS/health" | grep -q '"health":"true"' && break
        kill -0 "$(cat "$dir/ha.pid")" 2>/dev/null || { tail -20 "$dir/ha.log" >&2; ha_log "$name exited"; return 1; }
        sleep 0.2
      done
      [ -n "$v" ] || { ha_stop "$dir"; ha_log "$name not healthy after 30 s (log $dir/ha.log)"; return 1; }
      HA_VERSION="$v" ;;
    *) ha_log "unknown HA server $name (${HA_NAMES[*]})"; return 1 ;;
  esac
  ha_log "$name: $HA_KIND $HA_VERSION at $HA_ADDRESS (PID $(cat "$dir/ha.pid"))"
}

ha_stop() { # DIR: the server by its PID (TERM, then KILL after 10 s)
  local f="$1/ha.pid" pid i
  [ -s "$f" ] || return 0
  pid="$(cat "$f")"
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$f"
}
