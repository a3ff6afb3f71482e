#!/bin/sh
# Prepares the best-of-five example in DIR (made when missing):
#   DIR/repo         the sample repository (branch main: slug.py, whose
#                    tests fail), made once and then left as it is;
#   DIR/swarmd.toml  a swarmd configuration with absolute paths, written
#                    every time: a `coder` agent (a stand-in for Claude Code
#                    that works offline) on worktrees of DIR/repo, a
#                    `judge`, a `merge` agent, the flows of this folder,
#                    state in DIR/state, listening on 127.0.0.1:7700.
# Running it again changes nothing but the configuration.
#
# usage: examples/best-of-five/setup.sh DIR
set -eu

[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 64; }
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
dir=$(cd "$1" && pwd)
case "$dir" in *'"'* | *'\'*) echo "$0: DIR may not hold \" or \\" >&2; exit 64 ;; esac

python=$(command -v python3) || { echo "$0: python3 is needed" >&2; exit 69; }
git=$(command -v git) || { echo "$0: git is needed" >&2; exit 69; }
# The agents' PATH: where python3 and git are, then the usual places.
path=
for d in "$(dirname "$python")" "$(dirname "$git")" /usr/local/bin /usr/bin /bin; do
    case ":$path:" in *":$d:"*) ;; *) path="${path:+$path:}$d" ;; esac
done

repo="$dir/repo"
if [ ! -e "$repo/.git" ]; then
    mkdir -p "$repo"
    cp "$here/sample/slug.py" "$here/sample/test_slug.py" "$here/sample/README.md" \
        "$here/sample/.gitignore" "$repo/"
    (
        cd "$repo"
        git init -q
        git symbolic-ref HEAD refs/heads/main
        git add -A
        # A fixed author and date: the same first commit on every machine.
        GIT_AUTHOR_NAME=example GIT_AUTHOR_EMAIL=example@example.invalid \
        GIT_COMMITTER_NAME=example GIT_COMMITTER_EMAIL=example@example.invalid \
        GIT_AUTHOR_DATE="2026-01-01T00:00:00Z" GIT_COMMITTER_DATE="2026-01-01T00:00:00Z" \
            git commit -q -m "slug: a slugify whose tests fail"
    )
fi

cat > "$dir/swarmd.toml" <<EOF
# The best-of-five example (README.md, "Best of five"), written by
# $here/setup.sh.
#     swarmd serve --config $dir/swarmd.toml

[server]
bind = "127.0.0.1:7700"

[store]
backend = "sqlite"
state_dir = "$dir/state"

# Claude Code on a worktree of the sample repository: here a stand-in that
# replays a recorded transcript offline. For the real CLI, set
# program = "claude" and env = ["PATH", "HOME", "ANTHROPIC_API_KEY"].
[agents.coder]
kind = "process"
description = "Claude Code (an offline stand-in) on a worktree of the sample repository."
program = "$here/claude-stand-in"
args = ["-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "acceptEdits"]
stream = "claude"
env = { PATH = "$path", PYTHONDONTWRITEBYTECODE = "1" }
timeout_secs = 600
worktree = { repo = "$repo", base = "main", keep = "on_failure" }

# Picks the attempt that passed its tests with the smallest diff.
[agents.judge]
kind = "process"
description = "Picks the best of the coders' attempts."
program = "$here/judge"
env = { PATH = "$path" }
timeout_secs = 60

# Makes the new branch from the judge's pick.
[agents.merge]
kind = "merge"
repo = "$repo"
base = "main"

[flows_dir]
path = "$here/flows"
EOF

echo "sample repository: $repo"
echo "configuration:     $dir/swarmd.toml"
echo "next:              swarmd serve --config $dir/swarmd.toml"
