// An nni-opevo export's kernel, or whole network, called from C++ as a program that deploys it does.
//
//   bash examples/cpp/build.sh                            # builds examples/cpp/call_kernel
//   examples/cpp/call_kernel EXPORT IN... OUT [--repeat N]
//
// EXPORT is the folder `nni-opevo export` (or `launch`) wrote: best.json names the library
// (best.so) and the DLTensors its function `main` takes (`arguments`: each input, then the
// output, by name, shape and type); a whole network's network.json names network.so, whose
// `main` (in TVM's Relax virtual machine) takes the image and every weight and bias and returns
// the output. Each IN holds an input's values, OUT receives the output's: raw, in C order, as
// NumPy's `tofile` writes them. Before the call, each file's size is checked against its
// tensor's; an input that indexes a tensor is held to its `positions` (the kernel would read past
// the tensor); and this CPU must report the `instructions` the library was built for (else it
// stops with an illegal instruction). The tensors are allocated 64-byte aligned, which TVM's CPU
// kernels assume: their aligned vector loads fault on a buffer that is not. With --repeat N it
// also prints the median of N timed calls. Every refusal is one line on stderr, exit status 2.
#include <dlpack/dlpack.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/json.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace ffi = tvm::ffi;
namespace json = tvm::ffi::json;

namespace {

constexpr size_t kAlignment = 64;  // bytes: what TVM declares its kernels' buffers aligned to

// One line for the user, naming what is wrong.
struct Refusal : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A CPU allocator for ffi::Tensor::FromNDAlloc: 64-byte aligned memory.
struct AlignedAlloc {
  void AllocData(DLTensor* tensor) {
    size_t bytes = ffi::GetDataSize(*tensor);
    tensor->data = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
    if (tensor->data == nullptr) throw Refusal("cannot allocate " + std::to_string(bytes) + " bytes");
  }
  void FreeData(DLTensor* tensor) { std::free(tensor->data); }
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Refusal("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// best.json's field `name` of `object`, or a refusal naming it.
ffi::Any Field(const json::Object& object, const char* name, const std::string& where) {
  auto found = object.Get(ffi::String(name));
  if (!found.has_value()) throw Refusal(where + " has no field '" + name + "': export it again with this version");
  return *found;
}

// One DLTensor argument of `main`, as best.json's `arguments` describes it.
struct Argument {
  std::string name;
  std::vector<int64_t> shape;
  DLDataType dtype;
  json::Array positions;  // for an input that indexes a tensor: the values it may hold, per part
};

std::vector<Argument> ReadArguments(const json::Object& best, const std::string& path) {
  std::vector<Argument> arguments;
  for (const ffi::Any& item : Field(best, "arguments", path).cast<json::Array>()) {
    auto entry = item.cast<json::Object>();
    Argument argument;
    argument.name = std::string(Field(entry, "name", path).cast<ffi::String>());
    for (const ffi::Any& extent : Field(entry, "shape", path).cast<json::Array>()) {
      argument.shape.push_back(extent.cast<int64_t>());
    }
    argument.dtype = ffi::StringToDLDataType(Field(entry, "dtype", path).cast<ffi::String>());
    if (auto positions = entry.Get(ffi::String("positions"))) argument.positions = positions->cast<json::Array>();
    arguments.push_back(std::move(argument));
  }
  if (arguments.empty()) throw Refusal(path + " lists no arguments");
  return arguments;
}

// The integer at element `i` of an integer tensor.
int64_t IntegerAt(const DLTensor& tensor, int64_t i) {
  const char* data = static_cast<const char*>(tensor.data);
  bool is_signed = tensor.dtype.code == kDLInt;
  switch (tensor.dtype.bits) {
    case 8: return is_signed ? reinterpret_cast<const int8_t*>(data)[i] : reinterpret_cast<const uint8_t*>(data)[i];
    case 16: return is_signed ? reinterpret_cast<const int16_t*>(data)[i] : reinterpret_cast<const uint16_t*>(data)[i];
    case 32: return is_signed ? reinterpret_cast<const int32_t*>(data)[i] : reinterpret_cast<const uint32_t*>(data)[i];
    default: return reinterpret_cast<const int64_t*>(data)[i];
  }
}

// Refuses an input holding a position outside a range of its `positions`: each range bounds the
// elements whose index matches its `where` (a position per axis, or null for every one).
void CheckPositions(const Argument& argument, const DLTensor& tensor, const std::string& file) {
  int64_t count = 1;
  for (int64_t axis = 0; axis < tensor.ndim; ++axis) count *= tensor.shape[axis];
  for (const ffi::Any& item : argument.positions) {
    auto range = item.cast<json::Object>();
    int64_t low = range["low"].cast<int64_t>(), high = range["high"].cast<int64_t>();
    auto where = range["where"].cast<json::Array>();
    for (int64_t i = 0; i < count; ++i) {
      bool covered = true;
      for (int64_t axis = tensor.ndim - 1, rest = i; axis >= 0; --axis) {
        int64_t index = rest % tensor.shape[axis];
        rest /= tensor.shape[axis];
        if (axis < static_cast<int64_t>(where.size()) && where[axis] != nullptr) {
          covered = covered && where[axis].cast<int64_t>() == index;
        }
      }
      int64_t value = IntegerAt(tensor, i);
      if (covered && (value < low || value > high)) {
        throw Refusal("input " + argument.name + " (" + file + ") holds " + std::to_string(value) + ", outside " +
                      std::to_string(low) + ".." + std::to_string(high) + ", the positions of " +
                      std::string(range["indexes"].cast<ffi::String>()) + " it indexes");
      }
    }
  }
}

// Refuses a library built for instructions this CPU lacks (best.json's `instructions`, the flags
// Linux reports in /proc/cpuinfo): its code would stop the process with an illegal instruction.
void CheckInstructions(const json::Object& best, const std::string& folder) {
  auto needed = best.Get(ffi::String("instructions"));
  std::ifstream cpuinfo("/proc/cpuinfo");
  if (!needed.has_value() || *needed == nullptr || !cpuinfo) return;  // unknown: nothing to check
  std::string line, flags;
  while (std::getline(cpuinfo, line) && flags.empty()) {
    if (line.rfind("flags", 0) == 0) flags = " " + line.substr(line.find(':') + 1) + " ";
  }
  if (flags.empty()) return;
  std::string missing;
  for (const ffi::Any& flag : needed->cast<json::Array>()) {
    std::string name(flag.cast<ffi::String>());
    if (flags.find(" " + name + " ") == std::string::npos) missing += (missing.empty() ? "" : ", ") + name;
  }
  if (!missing.empty()) {
    throw Refusal(folder + " was built for a CPU with " + missing + ", which this CPU lacks (its code would stop "
                  "with an illegal instruction): tune it again here");
  }
}

int Run(int argc, char** argv) {
  std::vector<std::string> files;
  int repeat = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
      repeat = std::atoi(argv[++i]);
      if (repeat < 1) throw Refusal("--repeat must be a positive number of calls");
    } else {
      files.push_back(argv[i]);
    }
  }
  if (files.size() < 2) throw Refusal("usage: call_kernel EXPORT IN... OUT [--repeat N]");
  const std::string folder = files[0];
  // A kernel's export holds best.json; a whole network's, network.json (its main returns the output).
  const bool network = !std::ifstream(folder + "/best.json") && std::ifstream(folder + "/network.json");
  const std::string path = folder + (network ? "/network.json" : "/best.json");
  const std::string noun = network ? "network" : "kernel";
  ffi::String error;
  json::Value parsed = json::Parse(ReadFile(path), &error);
  if (!error.empty()) throw Refusal(path + " is not JSON (" + std::string(error) + "): export it again");
  auto best = parsed.cast<json::Object>();
  auto kind = std::string(Field(Field(best, "target", path).cast<json::Object>(), "kind", path).cast<ffi::String>());
  if (kind != "llvm") throw Refusal(folder + " holds a " + noun + " built for " + kind + "; this program calls CPU ones");
  CheckInstructions(best, folder);
  auto library_name = Field(best, "library", path);
  if (library_name == nullptr) throw Refusal(path + " names no library: the " + noun + " could not be built where it was exported");
  std::vector<Argument> arguments = ReadArguments(best, path);
  if (files.size() - 1 != arguments.size()) {
    throw Refusal("the " + noun + " takes " + std::to_string(arguments.size() - 1) + " inputs and gives an output: give " +
                  std::to_string(arguments.size()) + " files, got " + std::to_string(files.size() - 1));
  }

  std::vector<ffi::Tensor> tensors;  // the inputs, then (a kernel's) the output it writes
  for (size_t i = 0; i + (network ? 1 : 0) < arguments.size(); ++i) {
    const Argument& argument = arguments[i];
    ffi::Tensor tensor = ffi::Tensor::FromNDAlloc(AlignedAlloc(), ffi::ShapeView(argument.shape.data(),
                                                  argument.shape.size()), argument.dtype, DLDevice{kDLCPU, 0});
    const std::string& file = files[i + 1];
    size_t bytes = ffi::GetDataSize(*tensor.GetDLTensorPtr());
    if (i + 1 < arguments.size()) {
      std::error_code unreadable;
      auto size = std::filesystem::file_size(file, unreadable);  // before reading: a wrong file is not read whole
      std::string values = unreadable || size != bytes ? std::string() : ReadFile(file);
      if (unreadable) throw Refusal("cannot read " + file);
      if (values.size() != bytes) {
        throw Refusal("input " + argument.name + " (" + file + ") must hold " + std::to_string(bytes) + " bytes (" +
                      std::string(ffi::DLDataTypeToString(argument.dtype)) + " of its shape), got " +
                      std::to_string(values.empty() ? size : values.size()));
      }
      std::memcpy(tensor.GetDLTensorPtr()->data, values.data(), bytes);
      CheckPositions(argument, *tensor.GetDLTensorPtr(), file);
    }
    tensors.push_back(tensor);
  }

  ffi::Module library = ffi::Module::LoadFromFile(folder + "/" + std::string(library_name.cast<ffi::String>()));
  if (network) {  // a Relax virtual machine on the CPU, with TVM's pooled allocator (as Python's VirtualMachine)
    constexpr int kPooledAllocator = 2;
    library = library->GetFunction("vm_load_executable").value()().cast<ffi::Module>();
    library->GetFunction("vm_initialization").value()(static_cast<int>(kDLCPU), 0, kPooledAllocator);
  }
  ffi::Function main_function = library->GetFunction("main").value();
  std::vector<ffi::AnyView> views(tensors.begin(), tensors.end());
  auto call = [&]() {
    ffi::Any result;
    main_function.CallPacked(views.data(), static_cast<int32_t>(views.size()), &result);
    return network ? result.cast<ffi::Tensor>() : tensors.back();
  };
  const ffi::Tensor output = call();
  const size_t bytes = ffi::GetDataSize(*output.GetDLTensorPtr());
  std::ofstream out(files.back(), std::ios::binary);
  out.write(static_cast<const char*>(output.GetDLTensorPtr()->data), bytes);
  if (!out) throw Refusal("cannot write " + files.back());
  if (repeat > 0) {
    std::vector<double> seconds;
    for (int i = 0; i < repeat; ++i) {
      auto start = std::chrono::steady_clock::now();
      call();
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::nth_element(seconds.begin(), seconds.begin() + repeat / 2, seconds.end());
    std::printf("median of %d calls: %.6f ms\n", repeat, seconds[repeat / 2] * 1e3);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const Refusal& e) {
    std::fprintf(stderr, "call_kernel: %s\n", e.what());
  } catch (const ffi::Error& e) {
    std::fprintf(stderr, "call_kernel: %s: %s\n", e.kind().c_str(), e.message().c_str());
  }
  return 2;
}
