# Run by `cmake --install` and cpack (install(CODE) in Exlr8Package.cmake):
# installs the systemd units and the sysusers file with their command paths
# set to the prefix of THIS install, which `cmake --install --prefix` and
# cpack (CPACK_PACKAGING_INSTALL_PREFIX) may choose after configuring.
#
# The units in systemd/ name the commands as /usr/local/bin/NAME (the place a
# hand-copied binary goes, and what the tests run them as); only that path
# prefix is replaced, nothing else of the file, so the in-tree units stay the
# one source.
#
# In: EXLR8_UNITS_SOURCE_DIR, EXLR8_UNITS (file names in it),
#     EXLR8_UNITS_BINDIR, EXLR8_UNITS_DIR, EXLR8_SYSUSERS_DIR (relative to the
#     install prefix, or absolute), EXLR8_UNITS_WORK_DIR (a scratch folder in
#     the build tree).
foreach(_var EXLR8_UNITS_SOURCE_DIR EXLR8_UNITS EXLR8_UNITS_BINDIR EXLR8_UNITS_DIR EXLR8_SYSUSERS_DIR
             EXLR8_UNITS_WORK_DIR)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "Exlr8InstallUnits.cmake: ${_var} is not set")
  endif()
endforeach()

function(_exlr8_under_prefix out dir)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  else()
    set(${out} "${CMAKE_INSTALL_PREFIX}/${dir}" PARENT_SCOPE)
  endif()
endfunction()

_exlr8_under_prefix(_bindir "${EXLR8_UNITS_BINDIR}")
_exlr8_under_prefix(_unitdir "${EXLR8_UNITS_DIR}")
_exlr8_under_prefix(_sysusersdir "${EXLR8_SYSUSERS_DIR}")

# One scratch folder per destination, so two installs of one build tree to
# different prefixes never write each other's files.
string(MD5 _key "$ENV{DESTDIR}|${CMAKE_INSTALL_PREFIX}")
set(_work "${EXLR8_UNITS_WORK_DIR}/${_key}")
file(REMOVE_RECURSE "${_work}")
file(MAKE_DIRECTORY "${_work}")

set(_units "")
foreach(_name IN LISTS EXLR8_UNITS)
  file(READ "${EXLR8_UNITS_SOURCE_DIR}/${_name}" _text)
  string(REPLACE "/usr/local/bin/" "${_bindir}/" _text "${_text}")
  if(_name STREQUAL "exlr8d.sysusers")
    file(WRITE "${_work}/exlr8d.conf" "${_text}")
  else()
    file(WRITE "${_work}/${_name}" "${_text}")
    list(APPEND _units "${_work}/${_name}")
  endif()
endforeach()

# file(INSTALL) honours DESTDIR and records the files in the install
# manifest, as install(FILES) does.
file(INSTALL DESTINATION "${_unitdir}" TYPE FILE FILES ${_units})
if(EXISTS "${_work}/exlr8d.conf")
  file(INSTALL DESTINATION "${_sysusersdir}" TYPE FILE FILES "${_work}/exlr8d.conf")
endif()
