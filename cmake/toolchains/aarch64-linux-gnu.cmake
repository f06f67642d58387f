# Cross-compiles for aarch64 Linux with Debian's g++-aarch64-linux-gnu against
# the arm64 multiarch packages (dpkg --add-architecture arm64; libtbb-dev:arm64,
# libxsimd-dev:arm64, libbenchmark-dev:arm64). Tests run through qemu-user:
#   cmake -S . -B build-aarch64 -G Ninja \
#         -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake
#   cmake --build build-aarch64 && ctest --test-dir build-aarch64
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(MHA_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${MHA_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${MHA_CROSS_TRIPLE}-g++)
# Debian installs the arm64 packages' CMake configs and libraries under
# /usr/lib/aarch64-linux-gnu; this makes find_package/find_library look there.
set(CMAKE_LIBRARY_ARCHITECTURE ${MHA_CROSS_TRIPLE})

# /usr/aarch64-linux-gnu holds the cross libc/libstdc++; "/" is searched so
# that the multiarch directories under /usr are found. Programs always come
# from the host, libraries and headers only from the roots above.
set(CMAKE_FIND_ROOT_PATH /usr/${MHA_CROSS_TRIPLE} /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
# Header-only packages (catch2, xsimd) install their CMake configs in the
# architecture-independent /usr/lib/cmake and /usr/share, which CMake finds
# through the "/" root; BOTH keeps that working if a prefix is added.
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# pkg-config (OpenBLAS for the bench baselines) must read the arm64 .pc files,
# never the host's.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/${MHA_CROSS_TRIPLE}/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")

# ctest and catch_discover_tests run aarch64 binaries through qemu-user with
# the cross sysroot; binfmt_misc may not be registered on the host.
find_program(MHA_QEMU_AARCH64 qemu-aarch64)
if(MHA_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${MHA_QEMU_AARCH64} -L /usr/${MHA_CROSS_TRIPLE})
endif()
