#!/bin/sh
# Usage: find_python.sh VERSION [COMMAND]   e.g. find_python.sh 3.12 python3.12
# Prints the path of a working Python VERSION interpreter that can make a venv, or nothing (exit 1).
# COMMAND (default pythonVERSION) is tried first; a pyenv shim answers only where that version is
# selected, so pyenv's newest installed VERSION.x is tried next.
want="$1"
cmd="${2:-python$want}"

works() {
  "$1" -c "import sys, venv, ensurepip; sys.exit('%d.%d' % sys.version_info[:2] != '$want')" >/dev/null 2>&1
}

if works "$cmd"; then
  "$cmd" -c "import sys; print(sys.executable)"
  exit 0
fi
if command -v pyenv >/dev/null 2>&1; then
  root="$(pyenv root 2>/dev/null)"
  for dir in $(ls -d "$root/versions/$want".* 2>/dev/null | sort -r -V); do
    if works "$dir/bin/python$want"; then
      echo "$dir/bin/python$want"
      exit 0
    fi
  done
fi
exit 1
