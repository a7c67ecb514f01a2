# distcomm_add_backend(<name> <sources>...): the target every backend is built as:
# distcomm_<name> (alias DistComm::<name>, exported as <name>), its public headers in
# backends/<name>/include, linked to DistComm::core and (every backend but local itself) to
# DistComm::local: a program that offers a transport offers ranks as threads too, and the
# pkg-config module distcomm-<name> requires distcomm (core and local) the same way. The caller
# adds its transport library.
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
endfunction()
