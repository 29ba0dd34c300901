# scripts/release image: the daemon's container image (sourced by scripts/release, which defines
# here, TOOLS, REL, version, commit, log, ok, bad and finish). See scripts/release --help.

# podman as ../shared/container/README.md found it works here: rootful, runc, cgroupfs, the
# ulimits this machine allows (scripts/setup container writes $TOOLS/containers.conf).
podman_() { CONTAINERS_CONF="$TOOLS/containers.conf" podman "$@"; }

IMAGE_NAME="localhost/podsweep"
IMAGE_USER="65532:65532"

# arch (x86_64|aarch64) -> the OCI architecture name and the ELF machine readelf prints.
grouped() { python3 -c 'import sys; print(f"{int(sys.argv[1]):,}")' "$1"; }
oci_arch() { case "$1" in x86_64) echo amd64 ;; aarch64) echo arm64 ;; esac; }
elf_machine() { case "$1" in x86_64) echo "Advanced Micro Devices X86-64" ;; aarch64) echo "AArch64" ;; esac; }

image() {
  "$here/scripts/setup" container >&2
  local jar="$REL/podsweep-$version-linux.jar"
  [ -s "$jar" ] || { echo "release image: no $jar; run scripts/package first" >&2; exit 1; }
  local dropin="$here/java/kyuubi/dropin/target/podsweep-kyuubi-dropin-$version.jar"
  [ -s "$dropin" ] || dropin="$("$here/scripts/kyuubi" dropin)"
  local target="${PODSWEEP_MUSL_TARGET_DIR:-$TOOLS/target-musl}" a t0=$SECONDS
  # Release build of the binary alone, for both architectures in one cargo run; the target dir
  # lives in the tools cache, so a later run recompiles only podsweep itself.
  log "cargo zigbuild --release --bin podsweep (x86_64 and aarch64 musl, target dir $target)"
  (cd "$here" && PODSWEEP_GIT_COMMIT="$commit" CARGO_TARGET_DIR="$target" nice -n 10 cargo zigbuild --release --bin podsweep \
    --target x86_64-unknown-linux-musl --target aarch64-unknown-linux-musl >&2)
  log "musl binaries built in $((SECONDS - t0)) s"
  local ctx="$here/target/image"
  rm -rf "$ctx"
  mkdir -p "$ctx"
  cp "$here/container/Containerfile" "$ctx/"
  for a in x86_64 aarch64; do
    local bin="$target/$a-unknown-linux-musl/release/podsweep" root="$ctx/rootfs-$(oci_arch "$a")"
    local hdr; hdr="$(readelf -lh "$bin" 2>&1)"
    if grep -q "Machine: *$(elf_machine "$a")\$" <<<"$hdr" && ! grep -q "INTERP" <<<"$hdr" \
      && ! readelf -d "$bin" 2>/dev/null | grep -q NEEDED; then
      ok "$a binary: static ELF ($(elf_machine "$a")), no interpreter, no shared library, $(grouped "$(stat -c %s "$bin")") B"
    else bad "$a binary: not a static $(elf_machine "$a") executable"; fi
    mkdir -p "$root/etc/ssl/certs" "$root/opt/podsweep/jars"
    install -m 0755 "$bin" "$root/podsweep"
    install -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
    install -m 0644 "$jar" "$dropin" "$root/opt/podsweep/jars/"
  done
  local out
  out="$("$ctx/rootfs-amd64/podsweep" --version 2>&1)" && [ "$out" = "podsweep $version" ] \
    && ok "x86_64 binary runs: $out" || bad "x86_64 binary --version: $out"
  if command -v qemu-aarch64-static >/dev/null 2>&1; then
    out="$(qemu-aarch64-static "$ctx/rootfs-arm64/podsweep" --version 2>&1)" && [ "$out" = "podsweep $version" ] \
      && ok "aarch64 binary runs under qemu-aarch64-static: $out" || bad "aarch64 binary --version: $out"
  fi

  # Each architecture's image is tagged <ref>-<arch>; the manifest list with both exists only
  # while it is written to the archive (podman 4.3's `podman images` cannot list a list built
  # locally), and <ref> is then this machine's architecture's image.
  local ref="$IMAGE_NAME:$version" list="$IMAGE_NAME-list:$version"
  podman_ manifest rm "$list" >/dev/null 2>&1 || true
  podman_ rmi -f "$ref" "$ref-amd64" "$ref-arm64" >/dev/null 2>&1 || true
  podman_ manifest create "$list" >/dev/null
  for a in x86_64 aarch64; do
    log "podman build --platform linux/$(oci_arch "$a") --manifest $list -t $ref-$(oci_arch "$a")"
    if podman_ build -q --layers=false --platform "linux/$(oci_arch "$a")" --manifest "$list" -t "$ref-$(oci_arch "$a")" \
      --label "org.opencontainers.image.version=$version" --label "org.opencontainers.image.revision=$commit" \
      --label "org.opencontainers.image.licenses=Apache-2.0" --label "org.opencontainers.image.title=podsweep" \
      --timestamp 0 -f "$ctx/Containerfile" "$ctx" >/dev/null; then
      ok "podman build linux/$(oci_arch "$a") FROM scratch"
    else bad "podman build linux/$(oci_arch "$a")"; fi
  done
  local archive="$REL/podsweep-$version-image.oci.tar"
  rm -f "$archive"
  if podman_ manifest push --all --format oci "$list" "oci-archive:$archive" >/dev/null 2>&1; then
    ok "saved $(basename "$archive") ($(grouped "$(stat -c %s "$archive")") B)"
  else bad "podman manifest push --all oci-archive:$archive"; fi
  podman_ manifest rm "$list" >/dev/null
  podman_ tag "$ref-$(oci_arch "$(uname -m)")" "$ref"
  sbom "$target" "$jar" "$dropin"
  local line
  line="$(python3 - "$archive" "$version" "$IMAGE_USER" <<'PY'
import io, json, sys, tarfile
archive, version, user = sys.argv[1:4]
t = tarfile.open(archive)
def blob(digest):
    return t.extractfile("blobs/sha256/" + digest.split(":", 1)[1]).read()
entries = json.loads(t.extractfile("index.json").read())["manifests"]
# podman saves the manifest list as the one entry of index.json.
if len(entries) == 1 and entries[0]["mediaType"].endswith("image.index.v1+json"):
    entries = json.loads(blob(entries[0]["digest"]))["manifests"]
want = {"/podsweep", "/etc/ssl/certs/ca-certificates.crt",
        f"/opt/podsweep/jars/podsweep-{version}-linux.jar", f"/opt/podsweep/jars/podsweep-kyuubi-dropin-{version}.jar"}
problems, sizes, arches = [], [], set()
for m in entries:
    arch = m["platform"]["architecture"]
    arches.add(arch)
    man = json.loads(blob(m["digest"]))
    cfg = json.loads(blob(man["config"]["digest"]))
    c = cfg.get("config", {})
    if c.get("User") != user: problems.append(f"{arch}: user {c.get('User')!r}")
    if c.get("Entrypoint") != ["/podsweep"]: problems.append(f"{arch}: entrypoint {c.get('Entrypoint')}")
    if cfg.get("architecture") != arch: problems.append(f"{arch}: its config says {cfg.get('architecture')}")
    files, packed, unpacked = set(), 0, 0
    for layer in man["layers"]:
        packed += layer["size"]
        with tarfile.open(fileobj=io.BytesIO(blob(layer["digest"]))) as lt:
            for f in lt.getmembers():
                if f.isfile() or f.issym():
                    files.add("/" + f.name.lstrip("./"))
                    unpacked += f.size
    shells = sorted(f for f in files if f.rsplit("/", 1)[-1] in ("sh", "bash", "ash", "dash", "busybox"))
    if shells: problems.append(f"{arch}: a shell: {shells}")
    if files != want: problems.append(f"{arch}: files {sorted(files)}")
    sizes.append(f"linux/{arch} {packed:,} B compressed, {unpacked:,} B of files")
if arches != {"amd64", "arm64"}: problems.append(f"platforms {sorted(arches)}")
if problems:
    print("FAIL " + "; ".join(problems))
else:
    print("ok " + "; ".join(sizes) + f"; user {user}, entrypoint /podsweep, no shell, only the 4 files")
PY
)"
  case "$line" in ok\ *) ok "image index: ${line#ok }" ;; *) bad "image index: ${line#FAIL }" ;; esac
  # A run as Kubernetes' restricted profile runs it: read-only root, no capability, no privilege
  # escalation, no network.
  out="$(podman_ run --rm --read-only --cap-drop=all --security-opt=no-new-privileges --network=none "$ref" --version 2>&1)" \
    && [ "$out" = "podsweep $version" ] && ok "podman run --read-only --cap-drop=all $ref --version: $out" \
    || bad "podman run $ref --version: $out"
  finish image
}

# The image's SBOM: CycloneDX, its component the image; the binary's crates (cargo-cyclonedx for
# the musl target), the two jars and Debian's CA bundle as components.
sbom() {
  local target="$1" jar="$2" dropin="$3" dir
  "$here/scripts/setup" release-tools >&2
  dir="$(mktemp -d)"
  (cd "$here" && cargo cyclonedx --quiet --format json --spec-version 1.5 --no-build-deps \
    --target x86_64-unknown-linux-musl --override-filename podsweep-musl >&2) || { bad "cargo cyclonedx (musl)"; return; }
  mv "$here/podsweep-musl.json" "$dir/crates.json"
  python3 - "$dir/crates.json" "$REL/podsweep-$version-image.cdx.json" "$version" "$commit" "$jar" "$dropin" <<'PY' \
    && ok "SBOM podsweep-$version-image.cdx.json: $(python3 -c 'import json,sys; b=json.load(open(sys.argv[1])); print(len(b["components"]), "components, CycloneDX", b["specVersion"])' "$REL/podsweep-$version-image.cdx.json")" \
    || bad "the image SBOM"
import hashlib, json, subprocess, sys
crates_file, out, version, commit, jar, dropin = sys.argv[1:7]
crates = json.load(open(crates_file))
def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()
ca = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "ca-certificates"], capture_output=True, text=True).stdout
components = [c for c in crates.get("components", []) if c.get("name") != "podsweep"]
for path, name in ((jar, "podsweep-linux-jar"), (dropin, "podsweep-kyuubi-dropin")):
    components.append({"type": "library", "name": name, "version": version,
                       "hashes": [{"alg": "SHA-256", "content": sha256(path)}],
                       "properties": [{"name": "path", "value": "/opt/podsweep/jars/" + path.rsplit("/", 1)[-1]}]})
components.append({"type": "data", "name": "ca-certificates", "version": ca or "unknown",
                   "description": "Debian's CA bundle, /etc/ssl/certs/ca-certificates.crt",
                   "hashes": [{"alg": "SHA-256", "content": sha256("/etc/ssl/certs/ca-certificates.crt")}]})
bom = {"bomFormat": "CycloneDX", "specVersion": "1.5", "version": 1,
       "metadata": {"component": {"type": "container", "name": "podsweep", "version": version,
                                  "properties": [{"name": "vcs-commit", "value": commit},
                                                 {"name": "platforms", "value": "linux/amd64,linux/arm64"}]}},
       "components": components,
       "dependencies": crates.get("dependencies", [])}
json.dump(bom, open(out, "w"), indent=1)
PY
  rm -rf "$dir"
}
