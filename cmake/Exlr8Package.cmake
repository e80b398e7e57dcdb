# The systemd units' install rules (component `units`) and the Debian
# package (CPack), included by the top-level CMakeLists.txt after the
# commands' and the library's install rules.

# ---- systemd units and the sysusers file ----
# Where they go: relative to the install prefix, or absolute. Under the
# prefix /usr, systemd's own pkg-config file decides (Debian's /lib/... is
# /usr/lib/... on a merged /usr, and kept relative so that a package or
# `cmake --install --prefix` puts them under its own root); under any other
# prefix lib/systemd/system and lib/sysusers.d, which systemd also searches
# under /usr/local.
set(_exlr8_unit_dir_default lib/systemd/system)
set(_exlr8_sysusers_dir_default lib/sysusers.d)
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  pkg_get_variable(_exlr8_pc_unit_dir systemd systemdsystemunitdir)
  pkg_get_variable(_exlr8_pc_sysusers_dir systemd sysusersdir)
  foreach(_kind unit sysusers)
    set(_dir "${_exlr8_pc_${_kind}_dir}")
    if(_dir MATCHES "^/usr/(.+)$" OR _dir MATCHES "^/(lib/.+)$")
      set(_exlr8_${_kind}_dir_default "${CMAKE_MATCH_1}")
    elseif(_dir)
      set(_exlr8_${_kind}_dir_default "${_dir}")
    endif()
  endforeach()
endif()
set(EXLR8_SYSTEMD_UNIT_DIR "${_exlr8_unit_dir_default}" CACHE STRING
    "Where the systemd units are installed: relative to the install prefix, or absolute")
set(EXLR8_SYSUSERS_DIR "${_exlr8_sysusers_dir_default}" CACHE STRING
    "Where exlr8d.conf (sysusers.d) is installed: relative to the install prefix, or absolute")

# exlr8d-stage@.service only with the command it runs.
set(_exlr8_units exlr8d-serve.service exlr8d-pull@.service exlr8d-gc.service exlr8d-gc.timer
                 exlr8d-verify.service exlr8d-verify.timer exlr8d.sysusers)
if(TARGET exlr8d-stage)
  list(APPEND _exlr8_units exlr8d-stage@.service)
endif()
# The units are written at install time (cmake/Exlr8InstallUnits.cmake):
# the prefix they name is the install's, which may differ from the
# configured one.
install(CODE "
set(EXLR8_UNITS_SOURCE_DIR [[${PROJECT_SOURCE_DIR}/systemd]])
set(EXLR8_UNITS [[${_exlr8_units}]])
set(EXLR8_UNITS_BINDIR [[${CMAKE_INSTALL_BINDIR}]])
set(EXLR8_UNITS_DIR [[${EXLR8_SYSTEMD_UNIT_DIR}]])
set(EXLR8_SYSUSERS_DIR [[${EXLR8_SYSUSERS_DIR}]])
set(EXLR8_UNITS_WORK_DIR [[${PROJECT_BINARY_DIR}/systemd-install]])
include([[${PROJECT_SOURCE_DIR}/cmake/Exlr8InstallUnits.cmake]])
" COMPONENT units)
install(FILES ${PROJECT_SOURCE_DIR}/systemd/exlr8d-pull.env.example
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples COMPONENT units)

# ---- the Debian package: `cpack -G DEB` in the build tree ----
# One package, exlr8d_<version>_<arch>.deb: the commands, libexlr8client
# (shared and static), its headers, pkg-config file and CMake package, the
# units and the sysusers file, under /usr.
set(CPACK_PACKAGE_NAME exlr8d)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_DESCRIPTION
    "exlr8d pulls EXLR8 model filesets into a verified node cache, serves a local REST API over it and stages ranks into GPU memory for serving processes; libexlr8client is the library those processes link.")
# dpkg wants a Maintainer: whoever builds the package for a site names itself.
set(EXLR8_PACKAGE_MAINTAINER "exlr8d maintainers <exlr8d@localhost>" CACHE STRING
    "The Debian package's Maintainer field")
set(CPACK_PACKAGE_CONTACT "${EXLR8_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_COMPONENTS_ALL commands client units)
set(CPACK_STRIP_FILES ON)
if(IS_ABSOLUTE "${EXLR8_SYSTEMD_UNIT_DIR}" OR IS_ABSOLUTE "${EXLR8_SYSUSERS_DIR}")
  set(CPACK_SET_DESTDIR ON)  # an absolute destination lands in the package, not on this machine
endif()
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # exlr8d_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
# Depends from the ELF files' needs (dpkg-shlibdeps), and a shlibs file for
# libexlr8client.so.0.
find_program(EXLR8_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(EXLR8_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
  set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
  # exlr8d-stage needs the CUDA runtime (libcudart.so.N), which NVIDIA's
  # installers put outside dpkg's knowledge: dpkg-shlibdeps must find it
  # (then it adds no Depends for it: a GPU node has its own CUDA install).
  if(EXLR8_HAVE_CUDA)
    get_filename_component(_exlr8_cuda_root "${CMAKE_CUDA_COMPILER}" DIRECTORY)
    get_filename_component(_exlr8_cuda_root "${_exlr8_cuda_root}" DIRECTORY)
    foreach(_dir lib64 lib targets/${CMAKE_SYSTEM_PROCESSOR}-linux/lib)
      if(IS_DIRECTORY "${_exlr8_cuda_root}/${_dir}")
        list(APPEND CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS "${_exlr8_cuda_root}/${_dir}")
      endif()
    endforeach()
  endif()
else()
  message(STATUS "exlr8d: no dpkg-shlibdeps; the Debian package's Depends is not computed")
endif()
# The maintainer scripts: the system user and systemd's view of the units.
set(EXLR8_PACKAGE_SYSUSERS_FILE "${EXLR8_SYSUSERS_DIR}/exlr8d.conf")
if(NOT IS_ABSOLUTE "${EXLR8_PACKAGE_SYSUSERS_FILE}")
  set(EXLR8_PACKAGE_SYSUSERS_FILE "${CPACK_PACKAGING_INSTALL_PREFIX}/${EXLR8_PACKAGE_SYSUSERS_FILE}")
endif()
foreach(_script postinst prerm postrm)
  configure_file(${PROJECT_SOURCE_DIR}/packaging/debian/${_script}.in
                 ${PROJECT_BINARY_DIR}/packaging/debian/${_script} @ONLY
                 FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                                  WORLD_READ WORLD_EXECUTE)
  list(APPEND CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_BINARY_DIR}/packaging/debian/${_script})
endforeach()
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
