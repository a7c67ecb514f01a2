# Install rules and the CMake package (find_package(DistComm COMPONENTS ...)).
# Included once, at the end of the root CMakeLists.txt, after every component target is defined:
# only the components that were actually built (a target distcomm_<name> exists) are installed,
# exported and advertised to consumers.
include_guard(GLOBAL)

if(NOT DISTCOMM_INSTALL)
  return()
endif()

include(CMakePackageConfigHelpers)

set(DISTCOMM_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/DistComm"
    CACHE STRING "Where DistCommConfig.cmake is installed (relative to the prefix)")
mark_as_advanced(DISTCOMM_INSTALL_CMAKEDIR)

# Every component DistComm knows of; a component is built when its target distcomm_<name> exists.
# core always is; the backends are added conditionally by their own CMakeLists.
set(DISTCOMM_KNOWN_COMPONENTS core local mpi gloo ucx nccl)

set(DISTCOMM_BUILT_COMPONENTS "")
set(_distcomm_install_targets "")
foreach(_comp IN LISTS DISTCOMM_KNOWN_COMPONENTS)
  if(TARGET distcomm_${_comp})
    list(APPEND DISTCOMM_BUILT_COMPONENTS ${_comp})
    list(APPEND _distcomm_install_targets distcomm_${_comp})
  endif()
endforeach()
list(APPEND _distcomm_install_targets distcomm)  # the umbrella DistComm::DistComm

# distcomm_warnings is a build-only helper linked PRIVATE by every compiled component. For a static
# library CMake still records a PRIVATE dependency in the link interface ($<LINK_ONLY:...>), and
# install(EXPORT) then refuses to export a target that needs a non-exported one. Rewriting the
# reference here, once, keeps every current and future component's CMakeLists simple and keeps the
# helper (and its -Werror) out of consumers' builds.
foreach(_target IN LISTS _distcomm_install_targets)
  get_target_property(_links ${_target} INTERFACE_LINK_LIBRARIES)
  if(_links)
    string(REPLACE "$<LINK_ONLY:distcomm_warnings>" "$<LINK_ONLY:$<BUILD_INTERFACE:distcomm_warnings>>"
           _links "${_links}")
    set_property(TARGET ${_target} PROPERTY INTERFACE_LINK_LIBRARIES "${_links}")
  endif()
endforeach()

# ---- headers: include/ (core, strategies, fusion, communicator) and each built backend's ---------
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
        COMPONENT DistComm_Development
        FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
foreach(_comp IN LISTS DISTCOMM_BUILT_COMPONENTS)
  set(_dir "${PROJECT_SOURCE_DIR}/backends/${_comp}/include")
  if(IS_DIRECTORY "${_dir}")
    install(DIRECTORY "${_dir}/"
            DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
            COMPONENT DistComm_Development
            FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
  endif()
endforeach()

# ---- libraries and the export set --------------------------------------------------------------
install(TARGETS ${_distcomm_install_targets}
        EXPORT DistCommTargets
        RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT DistComm_Runtime
        LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT DistComm_Runtime
                NAMELINK_COMPONENT DistComm_Development
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT DistComm_Development
        INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")

install(EXPORT DistCommTargets
        NAMESPACE DistComm::
        FILE DistCommTargets.cmake
        DESTINATION "${DISTCOMM_INSTALL_CMAKEDIR}"
        COMPONENT DistComm_Development)

# ---- DistCommConfig.cmake + DistCommConfigVersion.cmake ----------------------------------------
# Before 1.0 a minor release may break the API, so 0.1.x only satisfies requests for 0.1.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_distcomm_compat SameMinorVersion)
else()
  set(_distcomm_compat SameMajorVersion)
endif()

configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/DistCommConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/cmake/DistCommConfig.cmake"
  INSTALL_DESTINATION "${DISTCOMM_INSTALL_CMAKEDIR}")
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/cmake/DistCommConfigVersion.cmake"
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY ${_distcomm_compat})

install(FILES "${PROJECT_BINARY_DIR}/cmake/DistCommConfig.cmake"
              "${PROJECT_BINARY_DIR}/cmake/DistCommConfigVersion.cmake"
        DESTINATION "${DISTCOMM_INSTALL_CMAKEDIR}"
        COMPONENT DistComm_Development)
# Find modules a component's consumers need (DistCommConfig.cmake adds its own folder to
# CMAKE_MODULE_PATH before finding them), e.g. cmake/FindNCCL.cmake for the nccl component.
if(TARGET distcomm_nccl AND EXISTS "${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake")
  install(FILES "${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake"
          DESTINATION "${DISTCOMM_INSTALL_CMAKEDIR}"
          COMPONENT DistComm_Development)
endif()

list(JOIN DISTCOMM_BUILT_COMPONENTS ", " _distcomm_built_text)
message(STATUS "DistComm: components built and installed: ${_distcomm_built_text}")
unset(_distcomm_built_text)
unset(_distcomm_compat)
unset(_distcomm_install_targets)
