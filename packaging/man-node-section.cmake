# SPDX-License-Identifier: MIT
# farpage(1)'s section of the `node` command, for help2man --include: the
# --help of `farpage node` and of each of its subcommands, as written.
#   cmake -DBIN=path/to/farpage -DOUT=file.h2m -P man-node-section.cmake
set(text "[NODE COMMAND]\n.nf\n")
foreach(args "node;--help" "node;list;--help" "node;forget;--help")
	execute_process(COMMAND ${BIN} ${args} OUTPUT_VARIABLE help
		RESULT_VARIABLE rc)
	if(NOT rc EQUAL 0)
		message(FATAL_ERROR "${BIN} ${args}: exit ${rc}")
	endif()
	# roff: a backslash is \e, a minus \-; no line starts with . or '
	string(REPLACE "\\" "\\e" help "${help}")
	string(REPLACE "-" "\\-" help "${help}")
	string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" help "${help}")
	string(APPEND text "${help}\n")
endforeach()
string(APPEND text ".fi\n")
file(WRITE ${OUT} "${text}")
