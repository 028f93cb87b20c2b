# Sourced by the engine build scripts (build-vllm-cpu.sh, build-transformers-serve.sh): one way to make an
# engine's cached venv and its image, outside the source tree. The caller sets `log` and sources common.sh.

# engine_venv PYTHON VENV RECIPE CHECK_PY EXPECTED SPEC... -- DROP...
# A venv at VENV with SPEC installed and DROP uninstalled; skipped when VENV/.installed holds RECIPE.
# CHECK_PY must print EXPECTED in the new venv. The stamp is written last: an interrupted install starts over.
engine_venv() {
  local python=$1 venv=$2 recipe=$3 check=$4 expected=$5
  shift 5
  local spec=() drop=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do spec+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  drop=("$@")
  [ "$(cat "$venv/.installed" 2>/dev/null)" = "$recipe" ] && return 0
  # Images copy this venv's site-packages under Debian's python3: the ABI must be 3.11.
  local pyver
  pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  [ "$pyver" = 3.11 ] || { log "$python is Python $pyver; the engine venv needs 3.11"; return 1; }
  log "Installing ${spec[*]} into $venv..."
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
  local install_log; install_log="$(dirname "$venv")/install.log"
  # pip's output goes to a log: this machine's extra indexes make it warn once per package.
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${spec[@]}" >"$install_log" 2>&1 \
    || { grep -v '^WARNING: Location' "$install_log" | tail -n 20 >&2; log "pip install failed ($install_log)"; return 1; }
  [ ${#drop[@]} -eq 0 ] || "$venv/bin/python" -m pip uninstall -q -y "${drop[@]}" >>"$install_log" 2>&1
  local got
  got=$("$venv/bin/python" -c "$check" 2>/dev/null) || got=
  [ "$got" = "$expected" ] || { log "the check of $venv failed (got '$got', expected '$expected')"; return 1; }
  echo "$recipe" > "$venv/.installed"
  log "installed in $venv ($(du -sh "$venv" | cut -f1))"
}

# engine_image DOCKERFILE DIR IMAGE BASE RECIPE
# IMAGE built from DOCKERFILE with DIR (the cache dir holding venv/) as context: only the venv's
# site-packages go in. Skipped when the image exists and DIR/image.stamp matches.
engine_image() {
  local dockerfile=$1 dir=$2 image=$3 base=$4 recipe=$5
  if [ -z "${BASE_IMAGE:-}" ]; then
    bash "$root/scripts/build-base-image.sh" "$base"
  fi
  cp "$dockerfile" "$dir/Dockerfile"
  printf '*\n!Dockerfile\n!venv/lib/python3.11/site-packages\n' > "$dir/.dockerignore"
  local stamp
  stamp=$( { cat "$dir/Dockerfile"; echo "$recipe"; echo "$base $(docker image inspect -f '{{.Id}}' "$base")"; } \
    | sha256sum | cut -c1-16)
  if docker image inspect "$image" >/dev/null 2>&1 && [ "$(cat "$dir/image.stamp" 2>/dev/null)" = "$stamp" ]; then
    return 0
  fi
  log "Building $image from $dir (base $base)..."
  DOCKER_BUILDKIT=1 docker build -q --build-arg "BASE_IMAGE=$base" -t "$image" "$dir" >/dev/null \
    || { log "docker build of $image failed (run it without -q to see why)"; return 1; }
  echo "$stamp" > "$dir/image.stamp"
  log "Built $image ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.1f GB", $1/1e9}'))"
}
