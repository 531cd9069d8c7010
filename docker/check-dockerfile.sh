#!/bin/sh
# Mechanical review of Rumor's Dockerfiles, for the rules of docker/README.md
# ("Image rules") that a script can decide; hadolint is not packaged in
# Debian 12, so this is the lint that `make test` runs
# (tests/integration/test_deploy.c). Prints FILE:LINE: RULE: message per
# problem and exits 1 when there is one.
#   D1 every base image is pinned (a version tag or a digest, never latest;
#      FROM ${ARG} is judged by the ARG's default)
#   D2 the final stage runs as a non-root USER
#   D3 nothing secret is copied in (no ADD; no COPY of keys, .key, .pem,
#      .env, id_*; no ENV/ARG named like a secret)
#   D4 apt-get install has -y and --no-install-recommends, the same RUN
#      removes /var/lib/apt/lists, and there is no apt-get upgrade
#   D5 every installed package exists in Debian 12 (apt-cache show); skipped
#      with a message where apt-cache is missing or this is not Debian 12
#   D6 ENTRYPOINT and CMD use the exec (JSON) form
#   D7 the final stage declares VOLUMEs for keys and checkpoints
# usage: check-dockerfile.sh DOCKERFILE...
set -u

debian12=0
if command -v apt-cache >/dev/null 2>&1 &&
    grep -q '^VERSION_ID="12"' /etc/os-release 2>/dev/null; then
    debian12=1
fi

# One logical instruction per line: "LINENO<TAB>INSTRUCTION", continuation
# lines joined and comments dropped.
logical() {
    awk '
    /^[ \t]*#/ { next }
    {
        line = $0
        if (buf == "") start = NR
        if (line ~ /\\[ \t]*$/) {
            sub(/\\[ \t]*$/, "", line)
            buf = buf line " "
            next
        }
        buf = buf line
        if (buf ~ /[^ \t]/) print start "\t" buf
        buf = ""
    }
    END { if (buf ~ /[^ \t]/) print start "\t" buf }' "$1"
}

# The rules that look at one instruction at a time.
check_lines() {
    awk -F '\t' -v file="$1" '
    function bad(rule, msg) { printf "%s:%d: %s: %s\n", file, $1, rule, msg; n++ }
    {
        split($2, w, /[ \t]+/)
        ins = toupper(w[1])
        if (ins == "") { ins = toupper(w[2]) }
        rest = $2
        sub(/^[ \t]*[A-Za-z]+[ \t]*/, "", rest)
    }
    # A global ARG with a default can name the base image (FROM ${BASE});
    # D1 then holds for that default.
    ins == "ARG" && last_from == "" && w[2] ~ /=/ {
        name = w[2]; sub(/=.*/, "", name)
        value = w[2]; sub(/^[^=]*=/, "", value)
        args[name] = value
    }
    ins == "FROM" {
        img = rest
        sub(/^--platform=[^ \t]+[ \t]+/, "", img)
        alias = ""
        if (match(img, /[ \t]+[Aa][Ss][ \t]+/)) {
            alias = substr(img, RSTART + RLENGTH)
            img = substr(img, 1, RSTART - 1)
        }
        for (name in args) {
            gsub("\\$\\{" name "\\}", args[name], img)
            if (img == "$" name) img = args[name]
        }
        if (!(img in stages) && img !~ /@sha256:[0-9a-f]+$/) {
            tag = img
            if (sub(/^.*:/, "", tag) == 0 || tag ~ /\// || tag == "latest" || tag !~ /[0-9]/)
                bad("D1", "base image " img " is not pinned to a version tag or a digest")
        }
        if (alias != "") stages[alias] = 1
        user = ""; vol = ""; last_from = $1
    }
    ins == "USER" { user = rest; user_line = $1 }
    ins == "ADD" { bad("D3", "ADD fetches and unpacks implicitly; use COPY") }
    ins == "COPY" {
        n_args = split(rest, a, /[ \t]+/)
        for (i = 1; i < n_args; i++) {
            if (a[i] ~ /^--/) continue
            if (a[i] ~ /(^|\/)keys(\/|$)|\.key$|\.pem$|(^|\/)\.env$|(^|\/)id_[a-z0-9]+$|secret/)
                bad("D3", "COPY of key material: " a[i])
        }
    }
    ins == "ENV" || ins == "ARG" {
        name = w[2]
        sub(/=.*/, "", name)
        if (toupper(name) ~ /KEY|SECRET|TOKEN|PASSW/)
            bad("D3", ins " " name " looks like a secret; pass secrets as files at run time")
    }
    ins == "RUN" && rest ~ /apt-get[ \t]+install/ {
        if (rest !~ /--no-install-recommends/) bad("D4", "apt-get install without --no-install-recommends")
        if (rest !~ /apt-get[^&|;]*[ \t](-y|--yes|-qy|-yq)([ \t]|$)/) bad("D4", "apt-get install without -y")
        if (rest !~ /rm -rf \/var\/lib\/apt\/lists/) bad("D4", "the RUN that installs does not remove /var/lib/apt/lists")
    }
    ins == "RUN" && rest ~ /apt-get[ \t]+(dist-)?upgrade/ { bad("D4", "apt-get upgrade in an image build") }
    (ins == "ENTRYPOINT" || ins == "CMD") && rest !~ /^\[/ { bad("D6", ins " is not in exec (JSON) form") }
    ins == "VOLUME" { vol = vol " " rest }
    END {
        if (user == "" ) { $1 = last_from; bad("D2", "the final stage has no USER: it would run as root") }
        else if (user ~ /^(root|0)(:|$)/) { $1 = user_line; bad("D2", "the final stage runs as root") }
        if (vol !~ /keys/) { $1 = last_from; bad("D7", "the final stage declares no VOLUME for keys") }
        if (vol !~ /checkpoint/) { $1 = last_from; bad("D7", "the final stage declares no VOLUME for checkpoints") }
        exit n > 0
    }'
}

# D5: the package names of every `apt-get install`, as "FILE PACKAGE".
packages() {
    logical "$1" |
        sed -n 's/^[0-9]*\t.*apt-get[ \t]*install\([^&|;]*\).*/\1/p' |
        tr -s '[:blank:]' '\n' | grep -v '^-' | grep -v '^$' | sort -u |
        sed "s|^|$1 |"
}

# One apt-cache call for every file (it is slow to start): a package is
# there when `apt-cache show` prints its "Package:" stanza.
check_packages() {
    list=$(for f in "$@"; do packages "$f"; done)
    [ -n "$list" ] || return 0
    # shellcheck disable=SC2046
    known=$(apt-cache show --no-all-versions $(echo "$list" | cut -d' ' -f2 | sort -u) 2>/dev/null |
        sed -n 's/^Package: //p')
    echo "$list" | while read -r file pkg; do
        if ! echo "$known" | grep -qx "$pkg"; then
            echo "$file: D5: package $pkg is not in Debian 12 (apt-cache show)"
        fi
    done | grep . && return 1
    return 0
}

failed=0
for f in "$@"; do
    if [ ! -r "$f" ]; then
        echo "$f: cannot read" >&2
        failed=1
        continue
    fi
    logical "$f" | check_lines "$f" || failed=1
done
if [ $debian12 -eq 1 ]; then
    check_packages "$@" || failed=1
else
    echo "D5 skipped: apt-cache of Debian 12 not available here"
fi
[ $failed -eq 0 ] && echo "check-dockerfile: $# file(s), no problem"
exit $failed
