// .npy reading and writing, and tensor files of either format.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/half.h"
#include "fusectl/kernels/npy.h"
#include "test_files.h"

using namespace fusectl;
using namespace fusectl::kernels;

namespace {

// A .npy file as numpy writes it: magic, version, header length, dict, padding, data.
std::string npyFile(const std::string& dict, const std::string& data, int major = 1) {
  std::string header = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const size_t len = header.size();
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>(len >> 8);
  if (major != 1) out += std::string(2, '\0');
  return out + header + data;
}

template <typename T>
std::string bytesOf(std::vector<T> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string tempDir() {
  auto dir = fusectl::testing::processTempPath("fusectl_test_npy");
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace

TEST_CASE("npy: every supported dtype round-trips") {
  const DType types[] = {DType::Float, DType::Float16, DType::Double, DType::Int8,
                         DType::UInt8, DType::Int16,   DType::UInt16, DType::Int32,
                         DType::UInt32, DType::Int64,  DType::UInt64, DType::Bool};
  const std::vector<std::vector<int64_t>> shapes = {{}, {5}, {2, 3, 4}, {0, 3}};
  for (DType dtype : types) {
    for (const auto& dims : shapes) {
      HostTensor t(dtype, dims);
      auto* p = static_cast<uint8_t*>(t.mutableRaw());
      for (size_t i = 0; i < t.byteSize(); ++i) p[i] = static_cast<uint8_t>(i * 7 + 1);
      if (dtype == DType::Bool) {
        for (size_t i = 0; i < t.byteSize(); ++i) p[i] &= 1;
      }
      const std::string bytes = npyBytes(t);
      const size_t header_end = bytes.size() - t.byteSize();
      CHECK(header_end % 64 == 0);
      CHECK(bytes[header_end - 1] == '\n');
      const HostTensor back = parseNpy(bytes, "mem");
      CHECK(back.dtype() == dtype);
      CHECK(back.dims() == dims);
      CHECK(std::memcmp(back.raw(), t.raw(), t.byteSize()) == 0);
    }
  }
}

TEST_CASE("npy: headers are written the way numpy writes them") {
  HostTensor t(DType::Float, {2, 3});
  const std::string bytes = npyBytes(t);
  CHECK(bytes.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  CHECK(bytes.find("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }") == 10);
  CHECK(npyBytes(HostTensor(DType::Int64, {7})).find("'shape': (7,), }") != std::string::npos);
  CHECK(npyBytes(HostTensor(DType::Bool, {})).find("'descr': '|b1'") != std::string::npos);
  CHECK(npyBytes(HostTensor(DType::Bool, {})).find("'shape': (), }") != std::string::npos);
  CHECK_THAT(errorOf([] { npyBytes(HostTensor(DType::BFloat16, {2})); }),
             Catch::Contains("bfloat16") && Catch::Contains(".pb"));
}

TEST_CASE("npy: reads the header variants numpy and Python 2 produce") {
  const std::string data = bytesOf<float>({1.5f, -2.f});
  auto check = [&](const HostTensor& t) {
    REQUIRE(t.dtype() == DType::Float);
    CHECK(t.dims() == std::vector<int64_t>{2});
    CHECK(t.data<float>()[1] == -2.f);
  };
  check(parseNpy(npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data), "a"));
  check(parseNpy(npyFile("{\"descr\":\"<f4\",\"shape\":(2L,),\"fortran_order\":False}", data), "b"));
  check(parseNpy(npyFile("{'descr': '=f4', 'fortran_order': False, 'shape': (2,), }", data, 2), "c"));
  check(parseNpy(npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data, 3), "d"));
  const HostTensor u8 =
      parseNpy(npyFile("{'descr': '|u1', 'fortran_order': False, 'shape': (1, 2), }", "\x05\x06"), "e");
  CHECK(u8.dtype() == DType::UInt8);
  CHECK(u8.data<uint8_t>()[1] == 6);
  const HostTensor h = parseNpy(
      npyFile("{'descr': '<f2', 'fortran_order': False, 'shape': (), }", bytesOf<uint16_t>({0x3c00})), "f");
  CHECK(h.dims().empty());
  CHECK(halfToFloat(h.data<uint16_t>()[0]) == 1.0f);
}

TEST_CASE("npy: rejects what it cannot read, saying why") {
  const std::string data = bytesOf<float>({1, 2, 3, 4});
  CHECK_THAT(errorOf([&] {
               parseNpy(npyFile("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", data),
                        "f.npy");
             }),
             Catch::Contains("f.npy") && Catch::Contains("Fortran"));
  CHECK_THAT(errorOf([&] {
               parseNpy(npyFile("{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", data),
                        "be.npy");
             }),
             Catch::Contains("be.npy") && Catch::Contains("big-endian"));
  CHECK_THAT(errorOf([&] {
               parseNpy(npyFile("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", data),
                        "c.npy");
             }),
             Catch::Contains("unsupported .npy dtype '<c8'"));
  CHECK_THAT(errorOf([&] {
               parseNpy(npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (8,), }", data),
                        "t.npy");
             }),
             Catch::Contains("truncated"));
  CHECK_THAT(errorOf([&] {
               parseNpy(npyFile("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }",
                                data),
                        "s.npy");
             }),
             Catch::Contains("s.npy") && Catch::Contains("malformed"));
  CHECK_THAT(errorOf([&] { parseNpy("not numpy", "x.npy"); }), Catch::Contains("magic"));
  CHECK_THAT(errorOf([] { readNpy("/nonexistent/dir/x.npy"); }), Catch::Contains("cannot open"));
}

TEST_CASE("npy: files and TensorProto files through readTensorFile") {
  const std::string dir = tempDir();
  HostTensor t(DType::Int32, {2, 2});
  for (int i = 0; i < 4; ++i) t.mutableData<int32_t>()[i] = i * 10 - 5;

  const std::string npy = dir + "/t.npy";
  writeTensorFile(t, "t", npy, TensorFileFormat::Npy);
  std::string name = "stale";
  HostTensor back = readTensorFile(npy, &name);
  CHECK(name.empty());
  CHECK(back.dims() == t.dims());
  CHECK(back.data<int32_t>()[3] == 25);

  const std::string pb = dir + "/t.pb";
  writeTensorFile(t, "my_tensor", pb, TensorFileFormat::Pb);
  back = readTensorFile(pb, &name);
  CHECK(name == "my_tensor");
  CHECK(back.dtype() == DType::Int32);
  CHECK(back.dims() == t.dims());
  CHECK(std::memcmp(back.raw(), t.raw(), t.byteSize()) == 0);
  std::filesystem::remove_all(dir);
}
