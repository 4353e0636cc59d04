#!/usr/bin/env bash
# Build the WordNet 3.0 corpus that `grader score-translation` (METEOR) reads, offline.
#
# NLTK's WordNet reader wants the dict files in <nltk_data>/corpora/wordnet/.
# This script takes them from Debian's WordNet 3.0 packages (wordnet-base,
# wordnet-sense-index: /usr/share/wordnet), installing the packages with apt-get
# when they are missing, adds the `lexnames` file Debian does not ship (the 45
# fixed WordNet 3.0 lexicographer file names) and the licence, and renames the
# finished folder into place. Nothing is fetched from NLTK's servers; the
# grader never calls nltk.download.
#
#   scripts/setup-wordnet.sh            # -> ${GRADER_NLTK_DATA:-$HOME/.cache/grader/nltk_data}/corpora/wordnet
#   GRADER_NLTK_DATA=/opt/nltk_data scripts/setup-wordnet.sh
#
# Idempotent: a folder built before from the same source files is left as it is.
# GRADER_WORDNET_SOURCE overrides /usr/share/wordnet (a folder of WordNet 3.0
# dict files, e.g. an unpacked WordNet-3.0/dict).
set -euo pipefail

SOURCE=${GRADER_WORDNET_SOURCE:-/usr/share/wordnet}
DATA_ROOT=${GRADER_NLTK_DATA:-$HOME/.cache/grader/nltk_data}
TARGET="$DATA_ROOT/corpora/wordnet"

# Every file NLTK's WordNetCorpusReader opens, except lexnames (written below).
FILES=(
  cntlist.rev index.sense
  index.adj index.adv index.noun index.verb
  data.adj data.adv data.noun data.verb
  adj.exc adv.exc noun.exc verb.exc
)

say() { printf 'setup-wordnet: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

missing_files() {
  local name
  for name in "${FILES[@]}"; do
    [[ -s "$SOURCE/$name" ]] || printf '%s ' "$name"
  done
}

missing=$(missing_files)
if [[ -n "$missing" ]]; then
  if [[ -n "${GRADER_WORDNET_SOURCE:-}" ]]; then
    die "$SOURCE lacks: ${missing% }"
  fi
  command -v apt-get >/dev/null 2>&1 || die "WordNet 3.0 is not in $SOURCE and apt-get is not available; install Debian's wordnet-base and wordnet-sense-index, or set GRADER_WORDNET_SOURCE to a WordNet 3.0 dict folder"
  SUDO=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "installing wordnet-base needs root (run as root, or: apt-get install wordnet-base wordnet-sense-index)"
    SUDO=(sudo)
  fi
  say "installing Debian packages wordnet-base wordnet-sense-index"
  export DEBIAN_FRONTEND=noninteractive
  if ! "${SUDO[@]}" apt-get install -y -q --no-install-recommends wordnet-base wordnet-sense-index >&2; then
    "${SUDO[@]}" apt-get update -q >&2
    "${SUDO[@]}" apt-get install -y -q --no-install-recommends wordnet-base wordnet-sense-index >&2
  fi
  missing=$(missing_files)
  [[ -z "$missing" ]] || die "after installing wordnet-base, $SOURCE still lacks: ${missing% }"
fi

grep -q 'WordNet 3\.0 Copyright' "$SOURCE/data.adj" || die "$SOURCE/data.adj is not WordNet 3.0 (no 'WordNet 3.0 Copyright' header)"

# A stamp naming the size and mtime of every source file decides whether to rebuild.
stamp=$(cd "$SOURCE" && for name in "${FILES[@]}"; do stat -L -c '%n %s %Y' "$name"; done)
stamp="grader-wordnet 1
$stamp"
if [[ -f "$TARGET/.grader-wordnet" && -f "$TARGET/lexnames" ]] && [[ "$(cat "$TARGET/.grader-wordnet")" == "$stamp" ]]; then
  say "up to date: $TARGET"
  printf '%s\n' "$TARGET"
  exit 0
fi

mkdir -p "$DATA_ROOT/corpora"
tmp=$(mktemp -d "$DATA_ROOT/corpora/.wordnet.XXXXXX.partial")
trap 'rm -rf "$tmp"' EXIT
for name in "${FILES[@]}"; do
  cp -L "$SOURCE/$name" "$tmp/$name"
done

# lexnames(5WN): file number, lexicographer file name, syntactic category
# (1 noun, 2 verb, 3 adjective, 4 adverb), tab-separated.
n=0
for entry in \
  adj.all:3 adj.pert:3 adv.all:4 noun.Tops:1 noun.act:1 noun.animal:1 noun.artifact:1 \
  noun.attribute:1 noun.body:1 noun.cognition:1 noun.communication:1 noun.event:1 \
  noun.feeling:1 noun.food:1 noun.group:1 noun.location:1 noun.motive:1 noun.object:1 \
  noun.person:1 noun.phenomenon:1 noun.plant:1 noun.possession:1 noun.process:1 \
  noun.quantity:1 noun.relation:1 noun.shape:1 noun.state:1 noun.substance:1 noun.time:1 \
  verb.body:2 verb.change:2 verb.cognition:2 verb.communication:2 verb.competition:2 \
  verb.consumption:2 verb.contact:2 verb.creation:2 verb.emotion:2 verb.motion:2 \
  verb.perception:2 verb.possession:2 verb.social:2 verb.stative:2 verb.weather:2 adj.ppl:3
do
  printf '%02d\t%s\t%s\n' "$n" "${entry%%:*}" "${entry##*:}"
  n=$((n + 1))
done >"$tmp/lexnames"
[[ $n -eq 45 ]] || die "internal: expected 45 lexicographer files, wrote $n"

if [[ -f /usr/share/doc/wordnet-base/copyright ]]; then
  cp /usr/share/doc/wordnet-base/copyright "$tmp/LICENSE"
else
  # The licence text heads every data file (lines "  N <text>").
  sed -n '/^  [0-9]/s/^  [0-9]* //p' "$SOURCE/data.adj" >"$tmp/LICENSE"
fi
printf 'WordNet 3.0 (Princeton University), taken from %s by scripts/setup-wordnet.sh for NLTK.\n' "$SOURCE" >"$tmp/README"
printf '%s\n' "$stamp" >"$tmp/.grader-wordnet"
chmod 755 "$tmp"

if [[ -e "$TARGET" || -L "$TARGET" ]]; then
  old="$DATA_ROOT/corpora/.wordnet.old.$$"
  mv "$TARGET" "$old"
  mv "$tmp" "$TARGET"
  rm -rf "$old"
else
  mv "$tmp" "$TARGET"
fi
trap - EXIT
say "WordNet 3.0 for NLTK ready: $TARGET"
printf '%s\n' "$TARGET"
