# SPDX-License-Identifier: MIT
# CPACK_POST_BUILD_SCRIPTS: CPack gives a package holding a shared library
# in /usr/lib a postinst and postrm that run ldconfig, unless the package
# brings its own. Debian's way is the ldconfig trigger libfarpage0 declares
# (deb/triggers), and lintian warns of the scripts
# (maintscript-calls-ldconfig), so they are taken out of libfarpage0 again:
# unpacked with dpkg-deb -R, dropped, packed again as root's.
foreach(deb IN LISTS CPACK_PACKAGE_FILES)
	get_filename_component(name ${deb} NAME)
	if(NOT name MATCHES "^libfarpage[0-9]+_")
		continue()
	endif()
	set(tree ${deb}.tree)
	file(REMOVE_RECURSE ${tree})
	execute_process(COMMAND dpkg-deb -R ${deb} ${tree}
		RESULT_VARIABLE rc)
	if(NOT rc EQUAL 0)
		message(FATAL_ERROR "dpkg-deb -R ${deb}: ${rc}")
	endif()
	foreach(s postinst postrm)
		if(EXISTS ${tree}/DEBIAN/${s})
			file(READ ${tree}/DEBIAN/${s} text)
			set(ws "[ \t\n]*")
			if(NOT text MATCHES "^#!/bin/sh${ws}set -e${ws}if \\[ \"\\$1\" = \"(configure|remove)\" \\]; then${ws}ldconfig${ws}fi${ws}$")
				message(FATAL_ERROR "${name}: ${s} does more than ldconfig: ${text}")
			endif()
			file(REMOVE ${tree}/DEBIAN/${s})
		endif()
	endforeach()
	execute_process(COMMAND dpkg-deb --root-owner-group -b ${tree} ${deb}
		OUTPUT_QUIET RESULT_VARIABLE rc)
	if(NOT rc EQUAL 0)
		message(FATAL_ERROR "dpkg-deb -b ${tree}: ${rc}")
	endif()
	file(REMOVE_RECURSE ${tree})
endforeach()
