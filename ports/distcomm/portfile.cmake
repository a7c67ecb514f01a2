# DistComm's vcpkg port. It lives in DistComm's repository (ports/distcomm) and is used as an
# overlay port from a checkout:  vcpkg install distcomm[gloo,mpi] --overlay-ports=<checkout>/ports
# It then builds that checkout. vcpkg's binary cache keys on the port files, not on the checkout:
# pass --no-binarycaching (or bump "port-version") after changing the sources.
#
# For a registry, replace the two lines below with a pinned download of a release, e.g.
#   vcpkg_from_github(
#     OUT_SOURCE_PATH SOURCE_PATH
#     REPO <owner>/distcomm          # the repository DistComm is published in
#     REF "v${VERSION}"
#     SHA512 0                       # vcpkg prints the real hash on the first run
#     HEAD_REF main)
get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
if(NOT EXISTS "${SOURCE_PATH}/CMakeLists.txt" OR NOT EXISTS "${SOURCE_PATH}/include/distcomm")
  message(FATAL_ERROR "distcomm: ${SOURCE_PATH} is not a DistComm checkout; use this port from "
                      "its repository's ports/ folder, or switch to vcpkg_from_github (see above)")
endif()

# Each feature turns one backend on (a missing dependency is then a configure error) and its
# absence turns it off, even where its library happens to be installed.
vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
  FEATURES
    mpi  DISTCOMM_WITH_MPI
    gloo DISTCOMM_WITH_GLOO
    ucx  DISTCOMM_WITH_UCX
    shm  DISTCOMM_WITH_SHM
    nccl DISTCOMM_WITH_NCCL
    cuda DISTCOMM_WITH_CUDA
)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    ${FEATURE_OPTIONS}
    -DDISTCOMM_BUILD_TESTS=OFF
    -DDISTCOMM_BUILD_EXAMPLES=OFF
    -DDISTCOMM_BUILD_BENCH=OFF
    -DDISTCOMM_INSTALL=ON
    -DDISTCOMM_WITH_TORCH=OFF  # a Python extension (bindings/torch), not part of the C++ package
)
vcpkg_cmake_install()

# lib/cmake/DistComm -> share/DistComm, so find_package(DistComm CONFIG) finds it in vcpkg's tree.
vcpkg_cmake_config_fixup(PACKAGE_NAME DistComm CONFIG_PATH lib/cmake/DistComm)
# distcomm.pc and distcomm-<backend>.pc: prefix= made relative to the file.
vcpkg_fixup_pkgconfig()

# distcomm-run, the local launcher, is a tool: tools/distcomm/.
vcpkg_copy_tools(TOOL_NAMES distcomm-run AUTO_CLEAN)

file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/debug/include" "${CURRENT_PACKAGES_DIR}/debug/share")

file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
