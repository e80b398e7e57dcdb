# Shared compile settings and the test registration helper.

# exlr8_set_warnings(target [TEST_CODE]): strict warnings, errors when
# EXLR8_WERROR, and the sanitizer of the build. TEST_CODE marks test sources
# (tests, their support library, fuzz drivers): with
# EXLR8_SANITIZE_TEST_CODE=OFF they are linked with ASan + UBSan but not
# instrumented, so what the sanitizers check is the product code the tests
# call (ASan needs only the runtime in the process to see a product
# library overrun a test's buffer). ThreadSanitizer instruments all code
# that shares memory with the code under test (an uninstrumented atomic
# would hide a happens-before edge and show as a false race: Asio's
# recycled handler memory, freed on another thread than allocated it, did
# in an uninstrumented hub simulator). TEST_SERVER marks the hub simulator,
# test infrastructure whose speed under TSan does not matter: in a TSan
# build it is instrumented at -O0, which compiles in about half the time.
function(exlr8_set_warnings target)
  cmake_parse_arguments(W "TEST_CODE;TEST_SERVER" "" "" ${ARGN})
  target_compile_options(${target} PRIVATE
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wshadow=local>
    # GCC 12 at -O3 reports std::string concatenation as overlapping memcpy
    # (a known false positive, GCC bug 105329); Release builds would not compile.
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-restrict>
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wnon-virtual-dtor
      -Wno-missing-field-initializers>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:Clang>,$<BOOL:${EXLR8_THREAD_SAFETY}>>:-Wthread-safety>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${EXLR8_WERROR}>>:-Werror>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${EXLR8_WERROR}>>:-Werror=all-warnings>)
  if(EXLR8_SANITIZE)
    if(NOT W_TEST_CODE OR EXLR8_SANITIZE_TEST_CODE)
      target_compile_options(${target} PRIVATE
        $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
    endif()
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
  if(EXLR8_TSAN AND W_TEST_SERVER)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O0 -fsanitize=thread -fno-omit-frame-pointer>)
    target_link_options(${target} PRIVATE -fsanitize=thread)
  elseif(EXLR8_TSAN)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=thread -fno-omit-frame-pointer>
      $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-tsan>)
    target_link_options(${target} PRIVATE -fsanitize=thread)
  endif()
endfunction()

# exlr8_library(name ALIAS alias SOURCES ... PUBLIC_DEPS ... PRIVATE_DEPS ...
#               [NO_UNITY])
# NO_UNITY: the library's sources cannot share a unity translation unit yet
# (file-local names that clash).
function(exlr8_library name)
  cmake_parse_arguments(A "NO_UNITY" "ALIAS" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${A_SOURCES})
  exlr8_unity_build(${name} ${A_NO_UNITY})
  add_library(${A_ALIAS} ALIAS ${name})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${A_PUBLIC_DEPS} PRIVATE ${A_PRIVATE_DEPS})
  exlr8_set_warnings(${name})
  if(EXLR8_SANITIZE)
    target_link_options(${name} INTERFACE -fsanitize=address,undefined)
  endif()
  if(EXLR8_TSAN)
    target_link_options(${name} INTERFACE -fsanitize=thread)
  endif()
endfunction()

# exlr8_unity_build(target [no_unity]): with EXLR8_UNITY_BUILD, the
# target's sources are compiled eight to a translation unit (CMake's unity
# build), so headers shared by a library's files are parsed once per batch.
# Sources with their own compile options (format/'s -O3 decoders) stay
# alone.
function(exlr8_unity_build target)
  if(EXLR8_UNITY_BUILD AND NOT ARGV1)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
    # g++ takes a .cpp included into the unity file for a header, and a
    # class of that .cpp with a member of its anonymous namespace's types
    # for one that other translation units could see.
    target_compile_options(${target} PRIVATE $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-subobject-linkage>)
  endif()
endfunction()

# exlr8_test_code_options(target): the optimisation level of test code
# (tests, their support library, fuzz drivers) when EXLR8_TEST_OPTIMIZE is
# set. scripts/test.sh builds them with -O1: test sources are two thirds of
# the build's compile time, and what they test (the product libraries, and
# the hub simulator, which serves every pull's bytes) keeps the build
# type's level. Not -O0: tests compare cached bytes one by one.
function(exlr8_test_code_options target)
  # g++ 12 at -O1 reports std::string concatenation in test bodies as out
  # of bounds, overflowing or overread (the false positives of GCC bug 105329, as
  # -Wno-restrict above), and, under the sanitizers, the std::function moves
  # inside <regex> as maybe-uninitialized (GCC bug 107138).
  target_compile_options(${target} PRIVATE $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-array-bounds -Wno-stringop-overflow -Wno-stringop-overread -Wno-maybe-uninitialized>)
  if(EXLR8_TEST_OPTIMIZE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${EXLR8_TEST_OPTIMIZE}>)
  endif()
endfunction()

# exlr8_test_pch(): the precompiled header every test reuses (GoogleTest,
# GoogleMock and the standard headers they pull in): parsing them was about
# two fifths of a test's compile time. Made once, on first use.
function(exlr8_test_pch)
  if(TARGET exlr8_test_pch)
    return()
  endif()
  file(WRITE ${CMAKE_BINARY_DIR}/exlr8_test_pch.cpp "// the translation unit of the tests' precompiled header\n")
  add_library(exlr8_test_pch OBJECT ${CMAKE_BINARY_DIR}/exlr8_test_pch.cpp)
  target_link_libraries(exlr8_test_pch PRIVATE GTest::gtest GTest::gmock Threads::Threads)
  target_include_directories(exlr8_test_pch PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(exlr8_test_pch PRIVATE
    EXLR8_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    EXLR8_SHARED_DIR="${PROJECT_SOURCE_DIR}/../shared"
    EXLR8_BIN_DIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}")
  exlr8_set_warnings(exlr8_test_pch TEST_CODE)
  exlr8_test_code_options(exlr8_test_pch)
  target_precompile_headers(exlr8_test_pch PRIVATE
    <gmock/gmock.h> <gtest/gtest.h>
    <algorithm> <atomic> <chrono> <cstdint> <cstring> <filesystem> <fstream> <functional> <map> <memory>
    <optional> <random> <set> <span> <sstream> <string> <string_view> <thread> <vector>)
endfunction()

# exlr8_parser_target(target): `target` runs under the label `parser`, so
# the target exlr8_parser_tests (what scripts/test.sh builds in its ASan
# tree before `ctest -L parser`) builds it.
function(exlr8_parser_target target)
  if(NOT TARGET exlr8_parser_tests)
    add_custom_target(exlr8_parser_tests)
  endif()
  add_dependencies(exlr8_parser_tests ${target})
endfunction()

# exlr8_add_test(name SOURCES ... DEPS ... [LABELS ...] [TIMEOUT s] [PREFIX p])
# One GoogleTest executable; each TEST() becomes a ctest test (named with
# PREFIX in front, when the same tests are built twice). Labels pick the
# tier (docs/TESTING.md): none is the default tier; `full` only in
# `scripts/test.sh --full`; `gpu` skips without a device.
function(exlr8_add_test name)
  cmake_parse_arguments(A "" "TIMEOUT;PREFIX" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  add_executable(${name} ${A_SOURCES})
  exlr8_test_code_options(${name})
  if(EXLR8_TEST_PCH)
    exlr8_test_pch()
    target_precompile_headers(${name} REUSE_FROM exlr8_test_pch)
  endif()
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gtest GTest::gmock GTest::gtest_main Threads::Threads)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(${name} PRIVATE
    EXLR8_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    EXLR8_SHARED_DIR="${PROJECT_SOURCE_DIR}/../shared"
    EXLR8_BIN_DIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}")
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  exlr8_set_warnings(${name} TEST_CODE)
  if("parser" IN_LIST A_LABELS)
    exlr8_parser_target(${name})
  endif()
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST TEST_PREFIX "${A_PREFIX}"
    PROPERTIES TIMEOUT ${A_TIMEOUT} LABELS "${A_LABELS}")
endfunction()
