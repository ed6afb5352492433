# Sourced by the device scripts: run NAME CAP COMMAND... runs one section when $sections names it,
# under its own time cap (CAP_<name>=seconds overrides), with its log in $OUT/<name>.log, and prints
# the exit code, the wall time and the log's last ${TAIL:-25} lines.
run() {
  local name=$1 cap=$2; shift 2
  case " $sections " in *" $name "*) ;; *) return 0 ;; esac
  local override="CAP_$name"; cap=${!override:-$cap}
  local t0=$SECONDS
  echo "== $name (cap ${cap}s): $*"
  timeout --kill-after=10 "$cap" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc in $((SECONDS - t0))s" | tee -a "$OUT/$name.log"
  tail -"${TAIL:-25}" "$OUT/$name.log"
}
