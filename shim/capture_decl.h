/* Prototypes of the capture-begin variants that cuda.h (with
 * __CUDA_API_VERSION_INTERNAL) and cuda_runtime_api.h leave undeclared;
 * identical to the toolkit's PFN_* typedefs (CUDA 13.0). Include after cuda.h
 * and cuda_runtime_api.h. */
#ifndef PT_CAPTURE_DECL_H
#define PT_CAPTURE_DECL_H
CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode);
CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                                  const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                                  CUstreamCaptureMode mode);
CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream);
CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph);
cudaError_t CUDARTAPI cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode);
cudaError_t CUDARTAPI cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t stream, cudaGraph_t graph,
                                                         const cudaGraphNode_t *dependencies,
                                                         const cudaGraphEdgeData *dependencyData,
                                                         size_t numDependencies, enum cudaStreamCaptureMode mode);
#endif
