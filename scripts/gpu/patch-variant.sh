#!/usr/bin/env bash
# Makes a variant to benchmark from a patch kept in scripts/gpu/plans/ (an experiment that
# is not on main: only what main holds survives a session): applies PATCH to revision BASE
# (default HEAD) in a temporary worktree, rebuilds the kernels' fatbin there when the patch
# touches kernels/ (the patches leave the fatbin out: it is built, not written), commits,
# keeps the commit reachable as refs/variants/NAME (NAME: the patch's file name without
# .patch) and prints its hash, for `scripts/gpu/pack.sh --variant X=$(...)`.
#
#   scripts/gpu/patch-variant.sh PATCH [BASE]
#
# nvcc as scripts/build-kernels.sh finds it (the pinned pip packages, or $NVCC).
set -euo pipefail
cd "$(dirname "$0")/../.."
PATCH=$(realpath "${1:?usage: patch-variant.sh PATCH [BASE]}")
BASE=${2:-HEAD}
NAME=$(basename "$PATCH" .patch)
tree=$(mktemp -d)
trap 'git worktree remove --force "$tree" >/dev/null 2>&1 || true' EXIT
git worktree add --quiet --detach "$tree" "$BASE" >&2
(
    cd "$tree"
    git apply "$PATCH"
    if git status --porcelain -- kernels | grep -q .; then
        scripts/build-kernels.sh >&2
    fi
    git add -A
    git -c user.name=kvpool-variant -c user.email=variant@kvpool.invalid \
        commit --quiet -m "variant $NAME: $(basename "$PATCH") on $(git rev-parse --short "$BASE")"
)
rev=$(git -C "$tree" rev-parse HEAD)
git update-ref "refs/variants/$NAME" "$rev"
echo "$rev"
