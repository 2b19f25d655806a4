# Shared by the tools' build scripts: each builds Go binaries from modules pinned in its own
# go.mod and caches them under the user's cache directory. Source it after setting `here` (the
# directory of the script's go.mod).

# A short digest of the module's go.sum: binaries built from a module shared by several tools
# are cached under it, since another tool's change of a shared dependency changes them too.
module_key() { sha256sum "$here/go.sum" | cut -c1-12; }

# The version go.mod pins for module $1.
version_of() { awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$here/go.mod"; }

# go_build CACHE NAME PACKAGE [LDFLAGS]: builds PACKAGE into CACHE/NAME unless it is there.
go_build() {
  local cache="$1" name="$2" package="$3" ldflags="${4:-}"
  [[ -x "$cache/$name" ]] && return 0
  # GANTRY_CHECK_ONLY=1: only say whether everything asked for is cached (exit 1 when not).
  [[ -z "${GANTRY_CHECK_ONLY:-}" ]] || return 1
  echo "building $name from $package (first time only; this takes minutes)" >&2
  local tmp
  tmp="$(mktemp "$cache/.$name.XXXXXX")"
  (cd "$here" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod \
    go build -trimpath -ldflags "-s -w $ldflags" -o "$tmp" "$package") >&2 || { rm -f "$tmp"; return 1; }
  # Renamed into place only once complete, so an interrupted build is never taken for a cached one.
  mv "$tmp" "$cache/$name"
}
