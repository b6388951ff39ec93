# What `cmake --install BUILD --prefix P` puts under P (docs/library.md): the `fusectl` CLI, the
# three libraries, their public headers and the CMake package that an outside project finds
# with find_package(fusectl), as fusectl::graph, fusectl::kernels and fusectl::passes.
# Install rules cost nothing in a normal build: they act only when `cmake --install` runs.
#
# The libraries stay static, as the CLI has always linked them: no shared-library ABI to keep
# stable at 0.x, no rpath or symbol-visibility work, and the CLI's code and speed stay what they
# were. The price is paid here: a static library hands what it links privately (libonnx,
# protobuf, fmt...) to the program that links it, so the package must find those packages
# again (fusectl_find_dependencies below).
include(CMakePackageConfigHelpers)

set(FUSECTL_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/fusectl)

set_target_properties(fusectl_graph PROPERTIES EXPORT_NAME graph)
set_target_properties(fusectl_kernels PROPERTIES EXPORT_NAME kernels)
set_target_properties(fusectl_passes PROPERTIES EXPORT_NAME passes)
# The static libraries list fusectl_warnings among what they link, so the export set must hold
# it. Installed, it is an empty interface target (its options are build-interface only).
set_target_properties(fusectl_warnings PROPERTIES EXPORT_NAME build_warnings)

install(TARGETS fusectl_graph fusectl_kernels fusectl_passes fusectl_warnings
        EXPORT fusectlTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# Whole trees, not a file list: headers are included as "fusectl/<library>/..." and
# "fusectl/support/...", and a header added to any of them is installed without an edit here.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/libgraph/include/ ${PROJECT_SOURCE_DIR}/libkernels/include/
                  ${PROJECT_SOURCE_DIR}/libpasses/include/
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# The installed CLI keeps the rpath of shared libraries outside the system folders (libcudart in
# /usr/local/cuda/lib64), which CMake otherwise strips at install time.
set_target_properties(fusectl PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS fusectl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The find_dependency() lines of fusectlConfig.cmake, from the packages that define the imported
# targets the three libraries link (publicly or privately). Read from the targets themselves, so
# moving a dependency from one library to another or dropping it needs no edit here; a library
# that starts linking an imported target of a package not listed below stops the configure
# with a message, rather than installing a package that fails in someone else's project.
function(fusectl_find_dependencies out)
  set(packages "")
  foreach(library fusectl_graph fusectl_kernels fusectl_passes)
    get_target_property(links ${library} LINK_LIBRARIES)
    foreach(link IN LISTS links)
      # Our own targets, generator expressions and plain library names need no package. A
      # name with "::" is an imported target even where this folder cannot see it (OpenSSL is
      # found in libpasses/CMakeLists.txt, so its targets are visible only there).
      if(link MATCHES "^(fusectl(_|::)|\\$<|::@)")
        continue()
      elseif(NOT link MATCHES "::")
        if(NOT TARGET ${link})
          continue()
        endif()
        get_target_property(imported ${link} IMPORTED)
        if(NOT imported)
          continue()
        endif()
      endif()
      if(link MATCHES "^(onnx|onnx_proto)$")
        # Debian's ONNXConfig.cmake names protobuf::libprotobuf without finding it.
        list(APPEND packages "Protobuf" "ONNX")
      elseif(link MATCHES "^protobuf::")
        list(APPEND packages "Protobuf")
      elseif(link STREQUAL "fmt::fmt")
        list(APPEND packages "fmt")
      elseif(link STREQUAL "nlohmann_json::nlohmann_json")
        list(APPEND packages "nlohmann_json 3")
      elseif(link STREQUAL "Threads::Threads")
        list(APPEND packages "Threads")
      elseif(link MATCHES "^OpenSSL::")
        list(APPEND packages "OpenSSL COMPONENTS Crypto")
      elseif(link MATCHES "^CUDA::")
        list(APPEND packages "CUDAToolkit")
      else()
        message(FATAL_ERROR "${library} links ${link}: name the package that defines it in "
                            "fusectl_find_dependencies (cmake/FusectlInstall.cmake), so that "
                            "the installed fusectl package finds it for the programs that use it")
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES packages)  # keeps the first: Protobuf stays before ONNX
  set(lines "")
  foreach(package IN LISTS packages)
    string(APPEND lines "find_dependency(${package})\n")
  endforeach()
  set(${out} "${lines}" PARENT_SCOPE)
endfunction()
fusectl_find_dependencies(FUSECTL_FIND_DEPENDENCIES)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/fusectlConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/fusectlConfig.cmake
                              INSTALL_DESTINATION ${FUSECTL_PACKAGE_DIR})
# 0.x: a minor version may break the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/fusectlConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(EXPORT fusectlTargets NAMESPACE fusectl:: DESTINATION ${FUSECTL_PACKAGE_DIR})
install(FILES ${PROJECT_BINARY_DIR}/fusectlConfig.cmake
              ${PROJECT_BINARY_DIR}/fusectlConfigVersion.cmake
        DESTINATION ${FUSECTL_PACKAGE_DIR})
