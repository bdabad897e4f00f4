#!/usr/bin/env bash
# Kaldi-style option parsing for recipe scripts: `--name value` sets the shell variable `name` (dashes → underscores)
# when the script defined it before sourcing this file; an unknown option is an error, `--help` prints the defaults.
# Usage in a script: define defaults, then `. "$ROOT/utils/parse_options.sh"`; remaining arguments stay in "$@".
__po_usage() {
  echo "usage: $0 [options]" >&2
  for __v in $__po_options; do echo "  --${__v//_/-} (default: ${!__v})" >&2; done
}
__po_options=${__po_options:?set __po_options to the list of option variable names before sourcing parse_options.sh}
while [ $# -gt 0 ]; do
  case "$1" in
    --help|-h) __po_usage; exit 0 ;;
    --*=*) __name=${1%%=*}; __val=${1#*=}; shift ;;
    --*) __name=$1; [ $# -ge 2 ] || { echo "$0: option $1 needs a value" >&2; exit 1; }; __val=$2; shift 2 ;;
    *) break ;;
  esac
  __var=${__name#--}; __var=${__var//-/_}
  case " $__po_options " in
    *" $__var "*) printf -v "$__var" '%s' "$__val" ;;
    *) echo "$0: unknown option $__name (valid: $(for v in $__po_options; do printf -- '--%s ' "${v//_/-}"; done))" >&2
       exit 1 ;;
  esac
done
unset __name __val __var __v
