# shellcheck shell=bash
# Finding the processes a test run started, wherever they ended up.
#
# A run exports a tag (a variable holding a value of its own) before it
# starts anything; every process it starts inherits the tag in its
# environment, through forks, execs, `ip netns exec`, setpriv and daemons
# whose parent died. fp_tagged lists them. Nothing here forks an external
# program: a scanner that ran `grep` would find itself.

# fp_tagged VAR VALUE: PIDs (one a line) of the processes whose environment
# holds VAR=VALUE, this shell and its subshells left out.
fp_tagged() {
	local want="$1=$2" d p e
	for d in /proc/[0-9]*; do
		p=${d#/proc/}
		[ "$p" = "$$" ] || [ "$p" = "$BASHPID" ] && continue
		while IFS= read -r -d '' e; do
			if [ "$e" = "$want" ]; then
				echo "$p"
				break
			fi
		done 2>/dev/null <"$d/environ"
	done 2>/dev/null
}

# fp_tagged_show PID...: one line a process, its PID, parent and command.
fp_tagged_show() {
	local p c pp
	for p in "$@"; do
		c=$(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline") || continue
		pp=$(sed -n 's/^PPid:[[:space:]]*//p' "/proc/$p/status" 2>/dev/null)
		echo "  pid $p (parent ${pp:-?}): ${c:0:200}"
	done
}
