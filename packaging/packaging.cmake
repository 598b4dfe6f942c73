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
	DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

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
if(man_ok)
	configure_file(${pkg_dir}/farpage.h2m.in ${CMAKE_BINARY_DIR}/man/farpage.h2m
		@ONLY)
	set(man_pages)
	foreach(page
			"farpage-cli|farpage|1|command-line tool of a farpage cluster"
			"farpage-coordinator|farpage-coordinator|8|farpage cluster coordinator: nodes, regions, endpoints"
			"farpage-node|farpage-node|8|farpage agent: page pool, page server and fault service of one host")
		string(REPLACE "|" ";" page "${page}")
		list(GET page 0 target)
		list(GET page 1 name)
		list(GET page 2 sec)
		list(GET page 3 what)
		set(out ${CMAKE_BINARY_DIR}/man/${name}.${sec})
		add_custom_command(OUTPUT ${out}.gz
			COMMAND ${FARPAGE_HELP2MAN} --no-info --section=${sec}
				--name=${what}
				--include=${CMAKE_BINARY_DIR}/man/farpage.h2m
				--output=${out} $<TARGET_FILE:${target}>
			COMMAND ${FARPAGE_GZIP} -9nf ${out}
			DEPENDS ${target} ${CMAKE_BINARY_DIR}/man/farpage.h2m
			COMMENT "Generating man page ${name}.${sec}" VERBATIM)
		list(APPEND man_pages ${out}.gz)
		install(FILES ${out}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man${sec})
	endforeach()
	add_custom_target(farpage-man ALL DEPENDS ${man_pages})
endif()

# The Debian package: `cpack -G DEB` in a build configured with
# -DCMAKE_INSTALL_PREFIX=/usr (scripts/package.sh). It holds what
# `cmake --install` installs, under the same prefix, stripped.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME farpage)
set(CPACK_PACKAGE_VENDOR farpage)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT
	"farpage maintainers <maintainers@users.noreply.a-seed-b88bb764.example>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "distributed-memory page server")
set(CPACK_PACKAGE_DESCRIPTION
	"A process on one host maps a region whose pages live on other hosts; a
page it touches that is not there is fetched from its owner (RDMA READ
with libibverbs, else TCP with io_uring) through userfaultfd.

This package holds the coordinator and the per-host agent (systemd units,
not enabled, configured in /etc/default/farpage), the farpage CLI,
libfarpage with its header and pkg-config file, and the preload library
that runs a stock QEMU with its guest RAM in a region (farpage vm).")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_SET_DESTDIR ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# dpkg-shlibdeps computes Depends from what the programs link.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# RDMA devices need their verbs provider; farpage vm runs QEMU.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS ibverbs-providers)
set(CPACK_DEBIAN_PACKAGE_SUGGESTS qemu-system-x86)
# conffiles: /etc/default/farpage. shlibs: what a package built against
# libfarpage.so.0 depends on (CPack's own would warn that the preload library
# has no soname). triggers: ldconfig, as CPack's own postinst would have.
get_target_property(FARPAGE_SOVERSION farpage SOVERSION)
foreach(f conffiles shlibs)
	configure_file(${pkg_dir}/deb/${f}.in ${CMAKE_BINARY_DIR}/deb/${f} @ONLY)
endforeach()
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/deb/conffiles
	${CMAKE_BINARY_DIR}/deb/shlibs ${pkg_dir}/deb/triggers
	${pkg_dir}/deb/postinst ${pkg_dir}/deb/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# `make package_source`: the sources, not build trees or git's store.
set(CPACK_SOURCE_IGNORE_FILES "/[.]git" "/build[^/]*/")
include(CPack)
