# SPDX-License-Identifier: MIT
# Everything `cmake --install` puts in place besides the programs and
# libraries (their own CMakeLists.txt install those), and the Debian package
# CPack makes of exactly that install (docs/packaging.md). Included at the
# end of the top-level CMakeLists.txt, after every target exists.
set(pkg_dir ${CMAKE_CURRENT_LIST_DIR})

# pkg-config: libfarpage for programs built outside this tree.
foreach(dir LIBDIR INCLUDEDIR)
	if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
		set(FARPAGE_PC_${dir} "${CMAKE_INSTALL_${dir}}")
	else()
		set(FARPAGE_PC_${dir} "\${prefix}/${CMAKE_INSTALL_${dir}}")
	endif()
endforeach()
configure_file(${pkg_dir}/farpage.pc.in ${CMAKE_BINARY_DIR}/farpage.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/farpage.pc
	DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# The systemd units (not enabled: the package does not start anything) and
# the environment file they read. GNUInstallDirs makes SYSCONFDIR /etc for
# the prefix /usr and PREFIX/etc otherwise.
set(FARPAGE_SYSTEMD_UNITDIR lib/systemd/system CACHE STRING
	"systemd system unit directory (relative to the prefix, or absolute)")
install(FILES ${CMAKE_SOURCE_DIR}/deploy/farpage-coordinator.service
	${CMAKE_SOURCE_DIR}/deploy/farpage-node.service
	DESTINATION ${FARPAGE_SYSTEMD_UNITDIR})
# A mapping per 2 MiB pool segment (docs/design.md): vm.max_map_count.
set(FARPAGE_SYSCTLDIR lib/sysctl.d CACHE STRING
	"sysctl.d directory (relative to the prefix, or absolute)")
install(FILES ${CMAKE_SOURCE_DIR}/deploy/60-farpage.conf
	DESTINATION ${FARPAGE_SYSCTLDIR})
set(FARPAGE_ENV_FILE ${CMAKE_INSTALL_FULL_SYSCONFDIR}/default/farpage)
install(FILES ${CMAKE_SOURCE_DIR}/deploy/farpage.env.example
	DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/default RENAME farpage)

# Documentation, with docs/ as a folder so README.md's links resolve.
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/
	DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs FILES_MATCHING PATTERN "*.md")

# Man pages: help2man runs the built programs' --help and --version. AUTO
# makes them where it can: not in sanitizer builds, whose programs may not
# start at build time (TSan under a high vm.mmap_rnd_bits), nor when cross
# compiling.
set(FARPAGE_MANPAGES AUTO CACHE STRING
	"Man pages from the programs' --help (help2man): AUTO, ON or OFF")
set_property(CACHE FARPAGE_MANPAGES PROPERTY STRINGS AUTO ON OFF)
find_program(FARPAGE_HELP2MAN help2man)
find_program(FARPAGE_GZIP gzip)
set(man_ok OFF)
if(FARPAGE_MANPAGES STREQUAL "ON")
	if(NOT FARPAGE_HELP2MAN OR NOT FARPAGE_GZIP)
		message(FATAL_ERROR "FARPAGE_MANPAGES=ON needs help2man and gzip "
			"(scripts/deps.sh installs them)")
	endif()
	set(man_ok ON)
elseif(FARPAGE_MANPAGES STREQUAL "AUTO")
	if(FARPAGE_SANITIZE OR CMAKE_CROSSCOMPILING)
		message(STATUS "man pages: not in a sanitizer or cross build")
	elseif(NOT FARPAGE_HELP2MAN OR NOT FARPAGE_GZIP)
		message(WARNING "help2man not found: no man pages are built or "
			"installed (scripts/deps.sh installs it)")
	else()
		set(man_ok ON)
	endif()
elseif(NOT FARPAGE_MANPAGES STREQUAL "OFF")
	message(FATAL_ERROR "FARPAGE_MANPAGES: AUTO, ON or OFF, not "
		"'${FARPAGE_MANPAGES}'")
endif()
# The CLI's commands (cli/main.c), each with a page farpage-COMMAND(1)
# but `node`, whose page would hide the agent's farpage-node(8) from `man
# farpage-node`: its --help is a section of farpage(1) instead. test_package
# checks that `farpage --help` lists no other.
set(FARPAGE_CLI_COMMANDS
	"status|nodes, peers and regions as the coordinator sees them"
	"region|create, list, show or delete regions"
	"node|list nodes, forget one that is gone for good"
	"fill|write the test pattern into the chunks this node owns"
	"touch|fault a region's pages in, time them, verify the pattern"
	"stats|the local agent's counters"
	"flush|send home the pages a region's mappings here have written"
	"handover|hand a movable mapping's write lease to another host"
	"vm|run QEMU with its guest RAM in a region"
	"run|run a program with its anonymous memory in a region"
	"migrate|move a farpage vm to another host, its RAM staying in place"
	"keygen|make a cluster key, or derive an admin or node key from it")
if(man_ok)
	set(FARPAGE_MAN_SEE_ALSO)
	foreach(cmd IN LISTS FARPAGE_CLI_COMMANDS)
		string(REGEX REPLACE "[|].*" "" cmd "${cmd}")
		if(NOT cmd STREQUAL "node")
			string(APPEND FARPAGE_MAN_SEE_ALSO
				",\n.BR farpage\\-${cmd} (1)")
		endif()
	endforeach()
	configure_file(${pkg_dir}/farpage.h2m.in ${CMAKE_BINARY_DIR}/man/farpage.h2m
		@ONLY)
	set(man_pages)
	# target|page|section|version string|--help option|what
	# farpage(1)'s section of `farpage node`, from its --help.
	set(node_h2m ${CMAKE_BINARY_DIR}/man/farpage-node-cmd.h2m)
	add_custom_command(OUTPUT ${node_h2m}
		COMMAND ${CMAKE_COMMAND} -DBIN=$<TARGET_FILE:farpage-cli>
			-DOUT=${node_h2m}
			-P ${pkg_dir}/man-node-section.cmake
		DEPENDS farpage-cli ${pkg_dir}/man-node-section.cmake
		COMMENT "farpage(1): the node command's section" VERBATIM)
	set(pages
		"farpage-cli|farpage|1|farpage|--help|command-line tool of a farpage cluster"
		"farpage-coordinator|farpage-coordinator|8|farpage-coordinator|--help|farpage cluster coordinator: nodes, regions, endpoints"
		"farpage-node|farpage-node|8|farpage-node|--help|farpage agent: page pool, page server and fault service of one host")
	# One page per CLI command, farpage-COMMAND(1), from `farpage COMMAND
	# --help` (cli/main.c's table).
	foreach(cmd IN LISTS FARPAGE_CLI_COMMANDS)
		string(REPLACE "|" ";" cmd "${cmd}")
		list(GET cmd 0 name)
		list(GET cmd 1 what)
		if(name STREQUAL "node")
			continue()
		endif()
		list(APPEND pages
			"farpage-cli|farpage-${name}|1|farpage-${name}|${name} --help|${what}")
	endforeach()
	foreach(page IN LISTS pages)
		string(REPLACE "|" ";" page "${page}")
		list(GET page 0 target)
		list(GET page 1 name)
		list(GET page 2 sec)
		list(GET page 3 prog)
		list(GET page 4 help)
		list(GET page 5 what)
		set(out ${CMAKE_BINARY_DIR}/man/${name}.${sec})
		set(extra)
		if(name STREQUAL "farpage")
			set(extra --include=${node_h2m})
		endif()
		add_custom_command(OUTPUT ${out}.gz
			COMMAND ${FARPAGE_HELP2MAN} --no-info --section=${sec}
				--name=${what} --help-option=${help}
				"--version-string=${prog} ${PROJECT_VERSION}"
				--include=${CMAKE_BINARY_DIR}/man/farpage.h2m
				${extra}
				--output=${out} $<TARGET_FILE:${target}>
			COMMAND ${FARPAGE_GZIP} -9nf ${out}
			DEPENDS ${target} ${CMAKE_BINARY_DIR}/man/farpage.h2m
				${node_h2m}
			COMMENT "Generating man page ${name}.${sec}" VERBATIM)
		list(APPEND man_pages ${out}.gz)
		install(FILES ${out}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man${sec})
	endforeach()
	add_custom_target(farpage-man ALL DEPENDS ${man_pages})
endif()


# The Debian packages: `cpack -G DEB` in a build configured with
# -DCMAKE_INSTALL_PREFIX=/usr (scripts/package.sh). One package per install
# component, split as Debian splits a library: farpage (bin), libfarpage0
# (lib) and libfarpage-dev (dev). Together they hold what `cmake --install`
# installs, under the same prefix, stripped.
set(FARPAGE_MAINTAINER
	"farpage maintainers <maintainers@users.noreply.a-seed-b88bb764.example>"
	CACHE STRING "The packages' Maintainer (and changelog signer): Name <address>")
if(NOT FARPAGE_MAINTAINER MATCHES "^[^<>]*[^ <>] <[^ <>@]+@[^ <>@]+[.][^ <>@]+>$")
	message(FATAL_ERROR "FARPAGE_MAINTAINER: 'Full Name <user@host.domain>', "
		"not '${FARPAGE_MAINTAINER}'")
endif()
set(deb_names bin farpage lib libfarpage0 dev libfarpage-dev)

# Every package's /usr/share/doc/PACKAGE has the copyright file and the
# changelog (a native package's: changelog.gz), as Debian policy asks. The
# changelog's date honours SOURCE_DATE_EPOCH (scripts/package.sh: the last
# commit's).
string(TIMESTAMP FARPAGE_CHANGELOG_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
configure_file(${pkg_dir}/deb/changelog.in ${CMAKE_BINARY_DIR}/deb/changelog @ONLY)
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/deb/changelog.gz
	COMMAND ${FARPAGE_GZIP} -9nkf ${CMAKE_BINARY_DIR}/deb/changelog
	DEPENDS ${CMAKE_BINARY_DIR}/deb/changelog VERBATIM)
add_custom_target(farpage-changelog ALL
	DEPENDS ${CMAKE_BINARY_DIR}/deb/changelog.gz)
foreach(comp IN ITEMS bin lib dev)
	list(FIND deb_names ${comp} i)
	math(EXPR i "${i} + 1")
	list(GET deb_names ${i} name)
	install(FILES ${pkg_dir}/deb/copyright ${CMAKE_BINARY_DIR}/deb/changelog.gz
		DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${name}
		COMPONENT ${comp})
	string(TOUPPER ${comp} c)
	set(CPACK_DEBIAN_${c}_PACKAGE_NAME ${name})
	set(CPACK_DEBIAN_${c}_FILE_NAME DEB-DEFAULT)
endforeach()

set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL bin lib dev)
set(CPACK_PACKAGE_NAME farpage)
set(CPACK_PACKAGE_VENDOR farpage)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${FARPAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${FARPAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SOURCE farpage)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_SET_DESTDIR ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# dpkg-shlibdeps computes Depends from what the programs and libraries link.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)

set(CPACK_DEBIAN_BIN_DESCRIPTION "distributed-memory page server
A process on one host maps a region whose pages live on other hosts; a
page it touches that is not there is fetched from its owner (RDMA READ
with libibverbs, else TCP with io_uring) through userfaultfd.
.
This package holds the coordinator and the per-host agent (systemd units,
not enabled, configured in /etc/default/farpage), the farpage CLI and the
preload libraries that run a stock QEMU with its guest RAM in a region
(farpage vm) and any program with its heap in one (farpage run).")
set(CPACK_DEBIAN_BIN_PACKAGE_SECTION net)
# RDMA devices need their verbs provider; farpage run preloads jemalloc;
# farpage vm runs QEMU.
set(CPACK_DEBIAN_BIN_PACKAGE_RECOMMENDS "ibverbs-providers, libjemalloc2")
set(CPACK_DEBIAN_BIN_PACKAGE_SUGGESTS qemu-system-x86)

set(CPACK_DEBIAN_LIB_DESCRIPTION "distributed-memory page server - shared library
libfarpage maps a farpage region into a process: its pages live on other
hosts and are faulted in through the local farpage agent.
.
This package holds the shared library.")
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)

set(CPACK_DEBIAN_DEV_DESCRIPTION "distributed-memory page server - development files
libfarpage maps a farpage region into a process: its pages live on other
hosts and are faulted in through the local farpage agent.
.
This package holds the header, the link libfarpage.so and the pkg-config
file farpage.pc, for building programs against libfarpage.")
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libfarpage0 (= ${PROJECT_VERSION})")

# farpage: conffiles (/etc/default/farpage), postinst and postrm.
# libfarpage0: shlibs (what a package built against libfarpage.so.0 depends
# on) and the ldconfig trigger, as CPack's own postinst would have.
get_target_property(FARPAGE_SOVERSION farpage SOVERSION)
foreach(f conffiles shlibs)
	configure_file(${pkg_dir}/deb/${f}.in ${CMAKE_BINARY_DIR}/deb/${f} @ONLY)
endforeach()
set(CPACK_DEBIAN_BIN_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/deb/conffiles
	${pkg_dir}/deb/postinst ${pkg_dir}/deb/postrm)
set(CPACK_DEBIAN_LIB_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/deb/shlibs
	${pkg_dir}/deb/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# ... and not the postinst and postrm calling ldconfig CPack adds.
set(CPACK_POST_BUILD_SCRIPTS ${pkg_dir}/deb/no-ldconfig-scripts.cmake)
# `make package_source`: the sources, not build trees or git's store.
set(CPACK_SOURCE_IGNORE_FILES "/[.]git" "/build[^/]*/")
include(CPack)
