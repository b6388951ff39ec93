// cuBLASLt and NVRTC, loaded on first use. Linked directly, libcublasLt.so (540 MB) and
// libnvrtc.so (110 MB) cost every fusectl process about a second of loading and relocation
// before main(), GPU or not, and the test suite starts hundreds of processes. Instead, each
// function fusectl calls is defined here with the header's own signature (a mismatch does not
// compile) and forwards to the real one, found with dlopen/dlsym when it is first called.
// cuDNN's libcudnn.so is a small loader of its own and the CUDA runtime is cheap: both stay
// linked.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nvrtc.h>

#include <string>

#include "fusectl/graph/error.h"

namespace {

// The library by its versioned soname (the ABI fusectl was compiled against), from the
// loader's search path, then from the toolkit fusectl was built with.
void* openLibrary(const std::string& soname) {
  void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
#ifdef FUSECTL_CUDA_LIBRARY_DIR
  if (!handle) {
    handle = dlopen((std::string(FUSECTL_CUDA_LIBRARY_DIR) + "/" + soname).c_str(),
                    RTLD_NOW | RTLD_LOCAL);
  }
#endif
  if (!handle) {
    const char* why = dlerror();
    throw fusectl::Error(fusectl::ErrorKind::Unsupported,
                         "cannot load " + soname + ": " + (why ? why : "not found"));
  }
  return handle;
}

void* cublasLtLibrary() {
  static void* handle = openLibrary("libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
  return handle;
}

void* nvrtcLibrary() {
  static void* handle = openLibrary("libnvrtc.so." + std::to_string(CUDART_VERSION / 1000));
  return handle;
}

void* symbol(void* library, const char* name) {
  void* fn = dlsym(library, name);
  if (!fn) {
    throw fusectl::Error(fusectl::ErrorKind::Unsupported,
                         std::string("the loaded CUDA library has no ") + name);
  }
  return fn;
}

}  // namespace

// The real function, looked up once.
#define FUSECTL_LAZY(lib, name)                                                            \
  ([] {                                                                                    \
    static const auto real = reinterpret_cast<decltype(&::name)>(symbol(lib##Library(), #name)); \
    return real;                                                                           \
  }())

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  return FUSECTL_LAZY(cublasLt, cublasLtCreate)(lightHandle);
}
const char* cublasLtGetStatusName(cublasStatus_t status) {
  return FUSECTL_LAZY(cublasLt, cublasLtGetStatusName)(status);
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
  return FUSECTL_LAZY(cublasLt, cublasLtMatmul)(lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace, workspaceSizeInBytes, stream);
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t preference, int requestedAlgoCount, cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount) {
  return FUSECTL_LAZY(cublasLt, cublasLtMatmulAlgoGetHeuristic)(lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference, requestedAlgoCount, heuristicResultsArray, returnAlgoCount);
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType, cudaDataType_t scaleType) {
  return FUSECTL_LAZY(cublasLt, cublasLtMatmulDescCreate)(matmulDesc, computeType, scaleType);
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  return FUSECTL_LAZY(cublasLt, cublasLtMatmulDescDestroy)(matmulDesc);
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t sizeInBytes) {
  return FUSECTL_LAZY(cublasLt, cublasLtMatmulDescSetAttribute)(matmulDesc, attr, buf, sizeInBytes);
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return FUSECTL_LAZY(cublasLt, cublasLtMatmulPreferenceCreate)(pref);
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return FUSECTL_LAZY(cublasLt, cublasLtMatmulPreferenceDestroy)(pref);
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf, size_t sizeInBytes) {
  return FUSECTL_LAZY(cublasLt, cublasLtMatmulPreferenceSetAttribute)(pref, attr, buf, sizeInBytes);
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
  return FUSECTL_LAZY(cublasLt, cublasLtMatrixLayoutCreate)(matLayout, type, rows, cols, ld);
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  return FUSECTL_LAZY(cublasLt, cublasLtMatrixLayoutDestroy)(matLayout);
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr, const void* buf, size_t sizeInBytes) {
  return FUSECTL_LAZY(cublasLt, cublasLtMatrixLayoutSetAttribute)(matLayout, attr, buf, sizeInBytes);
}
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char * const *options) {
  return FUSECTL_LAZY(nvrtc, nvrtcCompileProgram)(prog, numOptions, options);
}
nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int numHeaders, const char * const *headers, const char * const *includeNames) {
  return FUSECTL_LAZY(nvrtc, nvrtcCreateProgram)(prog, src, name, numHeaders, headers, includeNames);
}
nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog) {
  return FUSECTL_LAZY(nvrtc, nvrtcDestroyProgram)(prog);
}
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin) {
  return FUSECTL_LAZY(nvrtc, nvrtcGetCUBIN)(prog, cubin);
}
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet) {
  return FUSECTL_LAZY(nvrtc, nvrtcGetCUBINSize)(prog, cubinSizeRet);
}
nvrtcResult nvrtcGetNumSupportedArchs(int* numArchs) {
  return FUSECTL_LAZY(nvrtc, nvrtcGetNumSupportedArchs)(numArchs);
}
nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx) {
  return FUSECTL_LAZY(nvrtc, nvrtcGetPTX)(prog, ptx);
}
nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *ptxSizeRet) {
  return FUSECTL_LAZY(nvrtc, nvrtcGetPTXSize)(prog, ptxSizeRet);
}
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log) {
  return FUSECTL_LAZY(nvrtc, nvrtcGetProgramLog)(prog, log);
}
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet) {
  return FUSECTL_LAZY(nvrtc, nvrtcGetProgramLogSize)(prog, logSizeRet);
}
nvrtcResult nvrtcGetSupportedArchs(int* supportedArchs) {
  return FUSECTL_LAZY(nvrtc, nvrtcGetSupportedArchs)(supportedArchs);
}
const char* nvrtcGetErrorString(nvrtcResult result) {
  return FUSECTL_LAZY(nvrtc, nvrtcGetErrorString)(result);
}
