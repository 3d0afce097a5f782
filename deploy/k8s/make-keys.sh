#!/usr/bin/env bash
# make-keys.sh: API keys for the silos, and the key file they check them
# against (--auth-file).
#
#   deploy/k8s/make-keys.sh [-a] [-o FILE] PRINCIPAL[:GROUP[,GROUP...]]...
#
#   deploy/k8s/make-keys.sh alice ops:admins
#
# makes a random key for each principal (32 bytes from openssl, as 64 hex
# digits), writes the SHA-256 of each key with its principal and groups to
# FILE, and then prints each principal and its key, tab-separated, on
# stdout. The keys are stored nowhere: hand them to the clients now
# (`client --api-key KEY`, AGENTSILO_API_KEY, client.WithAPIKey). FILE is
# by default base/keys.json beside this script, the file the base's
# secretGenerator makes the Secret silo-auth of; the repository ships no
# such file, so the base does not render until this has run.
#
#   -o FILE  write FILE instead
#   -a       add the new keys to FILE, which this script wrote before (a new
#            client, or a principal's next key when rotating), instead of
#            refusing to replace it: replacing it would lock out every client
#            whose key it holds
#
# Names are the silo's: [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}. Members of group
# admins may change the ACL. Needs openssl, and sha256sum or shasum.
set -euo pipefail
export LC_ALL=C

usage() {
  echo "usage: $0 [-a] [-o FILE] PRINCIPAL[:GROUP[,GROUP...]]..." >&2
  exit 2
}

file="$(dirname "$0")/base/keys.json"
add=false
while getopts ao:h opt; do
  case $opt in
    a) add=true ;;
    o) file=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || usage

name='^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$'
for arg in "$@"; do
  principal=${arg%%:*}
  if ! [[ $principal =~ $name ]]; then
    echo "$0: principal \"$principal\" (in \"$arg\"): want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}" >&2
    exit 2
  fi
  if [[ $arg == *:* ]]; then
    IFS=, read -r -a groups <<<"${arg#*:},"
    if [ ${#groups[@]} -eq 0 ]; then groups=(""); fi
    for g in "${groups[@]}"; do
      if ! [[ $g =~ $name ]]; then
        echo "$0: group \"$g\" (in \"$arg\"): want [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}" >&2
        exit 2
      fi
    done
  fi
done

command -v openssl >/dev/null || { echo "$0: needs openssl" >&2; exit 1; }
if command -v sha256sum >/dev/null; then
  sha256() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
elif command -v shasum >/dev/null; then
  sha256() { printf %s "$1" | shasum -a 256 | cut -d' ' -f1; }
else
  echo "$0: needs sha256sum or shasum" >&2; exit 1
fi

# The file is one key per line, between a first line '{"keys": [' and a
# last line ']}', so that -a can add lines without a JSON tool.
head='{"keys": ['
tail=']}'
old=()
if [ -e "$file" ]; then
  if ! $add; then
    echo "$0: $file exists; give -a to add keys to it (replacing it would lock out the clients whose keys it holds), or remove it first" >&2
    exit 1
  fi
  mapfile -t old <"$file"
  n=${#old[@]}
  if [ "$n" -lt 3 ] || [ "${old[0]}" != "$head" ] || [ "${old[n - 1]}" != "$tail" ]; then
    echo "$0: $file is not a key file this script wrote (first line '$head', last line '$tail', a key per line between); add to it by hand" >&2
    exit 1
  fi
  old=("${old[@]:1:n-2}")
  last=$((${#old[@]} - 1))
  old[last]="${old[last]%,},"
fi

entries=() keys=()
for arg in "$@"; do
  principal=${arg%%:*}
  key=$(openssl rand -hex 32)
  [[ $key =~ ^[0-9a-f]{64}$ ]] || { echo "$0: openssl rand gave no key" >&2; exit 1; }
  hash=$(sha256 "$key")
  [[ $hash =~ ^[0-9a-f]{64}$ ]] || { echo "$0: no SHA-256 of the key" >&2; exit 1; }
  entry="  {\"sha256\": \"$hash\", \"principal\": \"$principal\""
  if [[ $arg == *:* ]]; then
    IFS=, read -r -a groups <<<"${arg#*:}"
    list=$(printf '"%s", ' "${groups[@]}")
    entry+=", \"groups\": [${list%, }]"
  fi
  entries+=("$entry},")
  keys+=("$principal	$key")
done
last=$((${#entries[@]} - 1))
entries[last]="${entries[last]%,}"

# Written whole, then renamed into place: never half a file.
umask 077
tmp=$(mktemp "$file.XXXXXX")
trap 'rm -f "$tmp"' EXIT
{
  echo "$head"
  [ ${#old[@]} -eq 0 ] || printf '%s\n' "${old[@]}"
  printf '%s\n' "${entries[@]}"
  echo "$tail"
} >"$tmp"
mv "$tmp" "$file"
trap - EXIT

echo "$0: wrote the SHA-256 of ${#keys[@]} new key(s) to $file; the keys follow, shown this once" >&2
printf '%s\n' "${keys[@]}"
