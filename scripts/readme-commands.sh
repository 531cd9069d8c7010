#!/bin/sh
# Runs the README's shell commands as a newcomer types them: every ```sh
# block before "## Deploy", in order, each command once, stopping at the
# first that fails. (The Deploy block needs a container engine; `make
# deploy-test` runs docker/README.md's version of it.) For a brand-new
# machine: scripts/fresh-root.sh "sh scripts/readme-commands.sh".
# README_SKIP: a grep -E pattern of commands not to run (say 'make test'
# when the caller runs it apart).
set -eu
cd "$(dirname "$0")/.."
cmds=$(mktemp)
trap 'rm -f "$cmds"' EXIT
awk '/^## Deploy/ { exit }
     /^```sh/ { inblock = 1; next }
     /^```/ { inblock = 0; next }
     inblock {
         sub(/[ \t]+#.*$/, "")
         if (sub(/\\$/, "")) { cont = cont $0; next }
         print cont $0; cont = ""
     }' README.md | grep -v '^[ \t]*$' >"$cmds"
n=0
while IFS= read -r cmd; do
    if [ -n "${README_SKIP:-}" ] && printf '%s\n' "$cmd" | grep -Eq "$README_SKIP"; then
        echo "readme: skipped: $cmd"
        continue
    fi
    n=$((n + 1))
    echo "readme: \$ $cmd"
    start=$(date +%s)
    if ! sh -c "$cmd" </dev/null; then
        echo "readme: FAILED: $cmd"
        exit 1
    fi
    echo "readme: ok in $(($(date +%s) - start)) s"
done <"$cmds"
echo "readme: all $n commands ran"
