# Shared by archs.sh and quants.sh (sourced): CG must name the cgroup v1
# memory group to create.

drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# incg LIMIT OUT CMD...: runs CMD in a fresh cgroup with LIMIT bytes after
# dropping caches; stdout and stderr go to OUT.stdout and OUT.stderr, the
# cgroup's peak (page cache included) to OUT.peak.
incg() {
	local limit=$1 out=$2
	shift 2
	[ -d "$CG" ] && rmdir "$CG"
	mkdir "$CG"
	echo "$limit" >"$CG/memory.limit_in_bytes"
	drop
	local rc=0
	sh -c 'echo $$ >'"$CG"'/cgroup.procs; exec "$@"' sh "$@" >"$out.stdout" 2>"$out.stderr" || rc=$?
	cat "$CG/memory.max_usage_in_bytes" >"$out.peak"
	for p in $(cat "$CG/cgroup.procs"); do kill -9 "$p" 2>/dev/null || true; done
	sleep 1
	rmdir "$CG"
	return $rc
}
