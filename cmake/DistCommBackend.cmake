# distcomm_add_backend(<name> <sources>...): the target every backend is built as:
# distcomm_<name> (alias DistComm::<name>, exported as <name>), its public headers in
# backends/<name>/include, linked to DistComm::core and (every backend but local itself) to
# DistComm::local: a program that offers a transport offers ranks as threads too, and the
# pkg-config module distcomm-<name> requires distcomm (core and local) the same way. The caller
# adds its transport library.
# A backend with a plugin.cpp beside its CMakeLists.txt is also built as a plugin
# (distcomm_add_backend_plugin below).
function(distcomm_add_backend name)
  add_library(distcomm_${name} ${ARGN})
  add_library(DistComm::${name} ALIAS distcomm_${name})
  set_target_properties(distcomm_${name} PROPERTIES EXPORT_NAME ${name}
                        OUTPUT_NAME distcomm_${name})
  target_include_directories(distcomm_${name} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(distcomm_${name} PUBLIC distcomm_core PRIVATE distcomm_warnings)
  if(NOT name STREQUAL "local")
    target_link_libraries(distcomm_${name} PUBLIC distcomm_local)
  endif()
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/plugin.cpp)
    distcomm_add_backend_plugin(${name} ${CMAKE_CURRENT_SOURCE_DIR}/plugin.cpp)
  endif()
endfunction()

# Where plugins are installed, relative to the prefix; the loader searches it (plugins/README.md).
set(DISTCOMM_INSTALL_PLUGINDIR "${CMAKE_INSTALL_LIBDIR}/distcomm/plugins"
    CACHE STRING "Where DistComm's backend plugins are installed (relative to the prefix)")
mark_as_advanced(DISTCOMM_INSTALL_PLUGINDIR)

# distcomm_add_backend_plugin(<name> <source>): libdistcomm_backend_<name>.so in build/lib,
# installed to DISTCOMM_INSTALL_PLUGINDIR: backend distcomm_<name> behind the C ABI of
# plugins/include/distcomm/distcomm_backend_v1.h. Only the ABI's entry point is exported: the copy
# of DistComm (and of static transport libraries) inside the plugin never interposes with the
# program's own.
function(distcomm_add_backend_plugin name source)
  set(_target distcomm_backend_${name})
  add_library(${_target} MODULE ${source})
  target_link_libraries(${_target} PRIVATE distcomm_${name} distcomm_plugin_abi distcomm_warnings)
  set_target_properties(${_target} PROPERTIES
    PREFIX "lib" OUTPUT_NAME distcomm_backend_${name}
    LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    LINK_DEPENDS ${PROJECT_SOURCE_DIR}/plugins/export.map)
  target_link_options(${_target} PRIVATE -Wl,--exclude-libs,ALL -Wl,--no-undefined
                      -Wl,--version-script=${PROJECT_SOURCE_DIR}/plugins/export.map)
  if(DISTCOMM_INSTALL)
    install(TARGETS ${_target} LIBRARY DESTINATION "${DISTCOMM_INSTALL_PLUGINDIR}"
            COMPONENT DistComm_Runtime)
  endif()
  set_property(GLOBAL APPEND PROPERTY DISTCOMM_PLUGINS ${name})
endfunction()
