# Sourced by the build scripts: one definition of where heavy build outputs go and of the docker client.
# Build outputs (site-packages, wheels, image contexts, tiny models) live outside the source tree, in
# ORCHESTRATOR_CACHE_DIR (default: the user's cache dir), so a fresh clone reuses them and git never sees them.
cache_dir=${ORCHESTRATOR_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/orchestrator}
mkdir -p "$cache_dir"
# The engine's own client (Debian's docker.io) builds with BuildKit without a buildx plugin.
docker() { if [ -x /usr/bin/docker ]; then /usr/bin/docker "$@"; else command docker "$@"; fi; }
