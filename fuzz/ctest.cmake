# Included by tests/CMakeLists.txt: one short libFuzzer run per fuzz target (label "fuzz").
# run.sh configures fuzz/ with clang in <build>/fuzz-build, builds the target, replays every
# input in fuzz/regressions/<corpus>/ and then fuzzes from fuzz/corpus/<corpus>/ for a bounded
# time. Without clang or its libFuzzer runtime the test is skipped (exit code 77).
set(DISTCOMM_FUZZ_DIR "${CMAKE_CURRENT_LIST_DIR}")

# distcomm_fuzz_test(target corpus): the ctest test <target>_short.
function(distcomm_fuzz_test target corpus)
  add_test(NAME ${target}_short
           COMMAND "${DISTCOMM_FUZZ_DIR}/run.sh"
                   --source "${PROJECT_SOURCE_DIR}"
                   --build "${PROJECT_BINARY_DIR}/fuzz-build"
                   --cmake "${CMAKE_COMMAND}"
                   --generator "${CMAKE_GENERATOR}"
                   --target ${target}
                   --corpus ${corpus}
                   --time 12)
  # One configure/build tree for every target: never two at once.
  set_tests_properties(${target}_short PROPERTIES
    LABELS fuzz TIMEOUT 900 SKIP_RETURN_CODE 77 RESOURCE_LOCK distcomm_fuzz_build)
endfunction()

# --- one line per target ---
distcomm_fuzz_test(fuzz_world world)
distcomm_fuzz_test(fuzz_store store)
