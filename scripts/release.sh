#!/usr/bin/env bash
# The release: what a centre installs without Go.
#
#   scripts/release.sh VERSION [OUTDIR]      # e.g. scripts/release.sh v0.5.0 dist
#
# Into OUTDIR (default dist/VERSION), for linux/amd64 and linux/arm64:
#   llmflow_VERSION_linux_ARCH.tar.gz   static binary (CGO_ENABLED=0), README, LICENSE,
#                                       systemd units, example configuration, dashboards
#   llmflow_VERSION_ARCH.deb            Debian/Ubuntu package  } /usr/bin/llmflow, the systemd unit,
#   llmflow-VERSION-1.ARCH.rpm          RHEL/Rocky/SUSE package} a `llmflow` system user, /etc/llmflow
#   llmflow_VERSION_linux_ARCH.oci.tar  OCI image archive (podman load, skopeo, apptainer build)
#   llmflow.def                         Apptainer definition building from the OCI archive
#   SHA256SUMS                          sha256sum -c SHA256SUMS
#
# Needs Go, tar, gzip, sha256sum; nfpm for .deb/.rpm (from PATH, else built
# with `go run` from the Go module proxy: NFPM_VERSION); umoci for the OCI
# image (Debian: apt-get install umoci). LLMFLOW_RELEASE_ARCHS="amd64"
# builds one architecture; LLMFLOW_RELEASE_SKIP="deb rpm oci" leaves parts
# out. Checked by TestRelease (cmd/llmflow, LLMFLOW_TEST_RELEASE=1).
set -euo pipefail
cd "$(dirname "$0")/.."

die() { printf 'scripts/release.sh: %s\n' "$*" >&2; exit 1; }
log() { printf '== %s\n' "$*" >&2; }

version=${1:-}
[ -n "$version" ] || die "usage: scripts/release.sh VERSION [OUTDIR] (VERSION like v0.5.0)"
[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$ ]] || die "VERSION $version: want vMAJOR.MINOR.PATCH[-pre]"
out=${2:-dist/$version}
archs=${LLMFLOW_RELEASE_ARCHS:-amd64 arm64}
skip=" ${LLMFLOW_RELEASE_SKIP:-} "
NFPM_VERSION=${NFPM_VERSION:-v2.45.2}
pkgver=${version#v}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The unit of a package: the binary at /usr/bin, not /usr/local/bin.
mkdir -p "$work/pkg"
for unit in llmflow.service llmflow@.service; do
	sed 's#/usr/local/bin/llmflow#/usr/bin/llmflow#g' "packaging/$unit" >"$work/pkg/$unit"
done

nfpm_cmd() {
	if command -v nfpm >/dev/null; then
		nfpm "$@"
	else
		go run "github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION" "$@"
	fi
}

for arch in $archs; do
	log "linux/$arch: static binary"
	bin="$work/$arch/llmflow"
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$bin" ./cmd/llmflow

	name="llmflow_${version}_linux_${arch}"
	log "$name.tar.gz"
	stage="$work/$arch/$name"
	mkdir -p "$stage/packaging" "$stage/examples" "$stage/dashboards"
	cp "$bin" README.md LICENSE "$stage/"
	cp packaging/llmflow.service packaging/llmflow@.service "$stage/packaging/"
	cp examples/gateway.hcl examples/nginx-llmflow.conf "$stage/examples/"
	cp dashboards/llmflow-grafana.json dashboards/llmflow-rules.yml "$stage/dashboards/"
	# Reproducible: fixed owner, mode and time, sorted names.
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='2000-01-01 00:00:00Z' \
		-C "$work/$arch" -cf - "$name" | gzip -n >"$out/$name.tar.gz"

	if [[ $skip != *" deb "* || $skip != *" rpm "* ]]; then
		cat >"$work/$arch/nfpm.yaml" <<EOF
name: llmflow
arch: $arch
platform: linux
version: $pkgver
release: 1
section: net
priority: optional
maintainer: llmflow maintainers <llmflow@localhost>
description: |
  OpenAI-compatible LLM gateway sharing a GPU cluster fairly between
  institutions (Slurm's Fair Tree), with accounting in GPU-hours.
vendor: llmflow
homepage: https://github.com/go-llmflow/llmflow
license: Apache-2.0
contents:
  - src: $bin
    dst: /usr/bin/llmflow
    file_info: {mode: 0755}
  - src: $work/pkg/llmflow.service
    dst: /usr/lib/systemd/system/llmflow.service
    file_info: {mode: 0644}
  - src: $work/pkg/llmflow@.service
    dst: /usr/lib/systemd/system/llmflow@.service
    file_info: {mode: 0644}
  - src: examples/gateway.hcl
    dst: /etc/llmflow/gateway.hcl
    type: config|noreplace
    file_info: {mode: 0640}
  - src: dashboards/llmflow-grafana.json
    dst: /usr/share/llmflow/dashboards/llmflow-grafana.json
  - src: dashboards/llmflow-rules.yml
    dst: /usr/share/llmflow/dashboards/llmflow-rules.yml
  - src: README.md
    dst: /usr/share/doc/llmflow/README.md
  - src: LICENSE
    dst: /usr/share/doc/llmflow/LICENSE
scripts:
  preinstall: packaging/scripts/preinstall.sh
  postinstall: packaging/scripts/postinstall.sh
  preremove: packaging/scripts/preremove.sh
  postremove: packaging/scripts/postremove.sh
EOF
		for fmt in deb rpm; do
			[[ $skip == *" $fmt "* ]] && continue
			log "$fmt ($arch)"
			nfpm_cmd package --config "$work/$arch/nfpm.yaml" --packager "$fmt" --target "$out/" >/dev/null
		done
	fi

	if [[ $skip != *" oci "* ]]; then
		command -v umoci >/dev/null || die "umoci is needed for the OCI image (apt-get install umoci; LLMFLOW_RELEASE_SKIP=oci leaves it out)"
		log "$name.oci.tar"
		img="$work/$arch/oci"
		umoci init --layout "$img"
		umoci new --image "$img:$version"
		umoci unpack --image "$img:$version" "$work/$arch/bundle" >/dev/null
		root="$work/$arch/bundle/rootfs"
		install -D -m 0755 "$bin" "$root/usr/bin/llmflow"
		install -D -m 0644 examples/gateway.hcl "$root/etc/llmflow/gateway.hcl"
		install -d -m 0700 "$root/var/lib/llmflow"
		chown -R 65532:65532 "$root/var/lib/llmflow"
		printf 'llmflow:x:65532:65532:llmflow:/var/lib/llmflow:/sbin/nologin\n' >"$root/etc/passwd"
		printf 'llmflow:x:65532:\n' >"$root/etc/group"
		umoci repack --image "$img:$version" "$work/$arch/bundle" >/dev/null
		umoci config --image "$img:$version" --architecture "$arch" --os linux \
			--config.user 65532:65532 --config.workingdir /var/lib/llmflow \
			--config.entrypoint /usr/bin/llmflow \
			--config.cmd serve --config.cmd -c --config.cmd /etc/llmflow/gateway.hcl --config.cmd --listen --config.cmd 0.0.0.0:8080 \
			--config.exposedports 8080/tcp --config.volume /var/lib/llmflow --config.volume /etc/llmflow \
			--config.label "org.opencontainers.image.version=$version" \
			--config.label "org.opencontainers.image.title=llmflow" \
			--config.label "org.opencontainers.image.licenses=Apache-2.0" \
			--history.created_by "scripts/release.sh $version"
		umoci gc --layout "$img"
		tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='2000-01-01 00:00:00Z' -C "$img" -cf "$out/$name.oci.tar" .
	fi
done

sed "s/@VERSION@/$version/g" packaging/llmflow.def >"$out/llmflow.def"

log "SHA256SUMS"
(cd "$out" && rm -f SHA256SUMS && sha256sum -- *.tar.gz *.deb *.rpm *.oci.tar llmflow.def 2>/dev/null >SHA256SUMS || true)
[ -s "$out/SHA256SUMS" ] || die "nothing was built into $out"
ls -l "$out" >&2
