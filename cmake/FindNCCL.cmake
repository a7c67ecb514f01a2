# FindNCCL: NVIDIA's collective communications library (nccl.h, libnccl).
#   find_package(NCCL [version] [REQUIRED])
# Searches NCCL_ROOT / $NCCL_ROOT / $NCCL_HOME, the CUDA toolkit's directories (when
# find_package(CUDAToolkit) ran first) and /usr/local/cuda, then the system paths.
# Sets NCCL_FOUND, NCCL_INCLUDE_DIR, NCCL_LIBRARY, NCCL_VERSION (from NCCL_MAJOR/MINOR/PATCH in
# nccl.h) and the imported target NCCL::NCCL.
set(_NCCL_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME})
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _NCCL_hints ${CUDAToolkit_LIBRARY_ROOT})
endif()
if(CUDAToolkit_TARGET_DIR)
  list(APPEND _NCCL_hints ${CUDAToolkit_TARGET_DIR})
endif()
list(APPEND _NCCL_hints /usr/local/cuda)

find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_NCCL_hints} ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include)
find_library(NCCL_LIBRARY nccl HINTS ${_NCCL_hints} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu)
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)

if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _NCCL_version_lines
       REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(_NCCL_part MAJOR MINOR PATCH)
    string(REGEX MATCH "NCCL_${_NCCL_part} +([0-9]+)" _NCCL_match "${_NCCL_version_lines}")
    set(NCCL_VERSION_${_NCCL_part} "${CMAKE_MATCH_1}")
  endforeach()
  if(NOT NCCL_VERSION_MAJOR STREQUAL "")
    set(NCCL_VERSION "${NCCL_VERSION_MAJOR}.${NCCL_VERSION_MINOR}.${NCCL_VERSION_PATCH}")
  endif()
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
                                  VERSION_VAR NCCL_VERSION)

if(NCCL_FOUND AND NOT TARGET NCCL::NCCL)
  add_library(NCCL::NCCL UNKNOWN IMPORTED)
  set_target_properties(NCCL::NCCL PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
unset(_NCCL_hints)
unset(_NCCL_version_lines)
unset(_NCCL_match)
unset(_NCCL_part)
