//===- StagedCollectives.cpp - device buffers, host collectives -*- C++ -*-===//
//
// The "host-staged" backend: collectives of device buffers run by the host
// backend (MPI under mpirun, else one process) on host copies of them. For
// machines without NCCL, and for several ranks on one GPU, which NCCL
// refuses. Each collective waits for the compute stream, copies its input to
// the host, runs there and copies the result back: two crossings of the bus
// per collective, a backend for checking steps rather than for speed.
//
//===----------------------------------------------------------------------===//

#include "Comm.h"
#include "Cuda.h"
#include "Elements.h"

namespace distopt::rt {
namespace {

class StagedCollectives : public DeviceCollectives {
public:
  explicit StagedCollectives(std::unique_ptr<Communicator> host)
      : host(std::move(host)) {}

  distopt_rt_status execute(const Collective &c, const What &what) override;
  std::unique_ptr<DeviceCollectives> over(Transport &part,
                                          distopt_rt_status *status) override {
    return createStagedCollectives(part, status);
  }

private:
  std::unique_ptr<Communicator> host;
  // Host copies, reused across collectives.
  std::vector<char> input, output;
};

distopt_rt_status StagedCollectives::execute(const Collective &c,
                                             const What &what) {
  int64_t in = c.count, out = c.count;
  if (c.kind == Collective::ReduceScatter)
    in *= host->size();
  if (c.kind == Collective::AllGather)
    out *= host->size();
  size_t bytes = elementSize(c.type);
  input.resize(in * bytes);
  output.resize(out * bytes);
  auto failed = [&] {
    return fail(DISTOPT_RT_BACKEND_ERROR,
                what.str() +
                    ": staging through host memory: " + cuda::stickyError());
  };
  // The compute stream's work so far (the input's producers) completes
  // before the copy, which the copy call waits for.
  if (!cuda::bindContext() || distopt_rt_cuda_synchronize() != DISTOPT_RT_OK ||
      distopt_rt_cuda_copy(input.data(), c.send, in * bytes) != DISTOPT_RT_OK)
    return failed();
  Collective staged = c;
  staged.send = input.data();
  staged.recv = output.data();
  // The host communicator stamps the collective with the operation it
  // belongs to (a step's, a save's) as the caller's thread would: an
  // asynchronous one runs here on the device communicator's worker thread.
  distopt_rt_status status;
  {
    OperationScope scope(c.operation);
    status = host->run(staged);
  }
  if (status != DISTOPT_RT_OK)
    return status;
  if (distopt_rt_cuda_copy(c.recv, output.data(), out * bytes) != DISTOPT_RT_OK)
    return failed();
  return DISTOPT_RT_OK;
}

} // namespace

std::unique_ptr<DeviceCollectives>
createStagedCollectives(Transport &bootstrap, distopt_rt_status *status) {
  if (!cuda::driver()) {
    *status = fail(
        DISTOPT_RT_UNAVAILABLE,
        "rank " + std::to_string(bootstrap.rank()) +
            ": the host-staged backend needs CUDA: " + cuda::stickyError());
    return nullptr;
  }
  // A transport of its own over the same ranks, so that its traffic never
  // meets the bootstrap's.
  std::unique_ptr<Transport> own = bootstrap.split(0, bootstrap.rank(), status);
  if (!own)
    return nullptr;
  own->timeout = bootstrap.timeout;
  *status = DISTOPT_RT_OK;
  return std::make_unique<StagedCollectives>(
      std::make_unique<Communicator>(std::move(own)));
}

} // namespace distopt::rt
