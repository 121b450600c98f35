//===- CheckpointMapping.cpp - a step's buffers to and from checkpoints ===//
//
// Checkpoints hold logical tensors (a parameter, or one of its state
// tensors), so that shards of any layout and world size map to and from
// them (docs/checkpoint.md).
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include <cstring>
#include <map>
#include <set>
#include <tuple>

namespace distopt::run {

bool isCheckpointed(const Slot &slot) {
  return slot.tensor && (slot.role == "param" || slot.role == "main_param" ||
                         slot.role == "state");
}

static std::string logicalName(const Slot &slot, const Entry &entry) {
  return checkpoint::logicalName(slot.role, slot.name, entry.name);
}

/// Every rank takes part (shards are gathered); rank 0's result is written.
checkpoint::Checkpoint collectCheckpoint(distopt_rt_comm *comm,
                                         const std::vector<Slot> &args,
                                         const std::vector<Buffer> &buffers,
                                         int64_t stepsDone,
                                         const std::string &model) {
  checkpoint::Checkpoint ckpt;
  ckpt.worldSize = worldSize;
  ckpt.step = stepsDone;
  ckpt.model = model;
  auto add = [&](const Slot &slot, std::string role, std::string name,
                 std::vector<int64_t> shape, const char *data, int64_t rank) {
    checkpoint::Tensor t{std::move(role),
                         std::move(name),
                         slot.dtype,
                         std::move(shape),
                         rank,
                         {}};
    t.data.assign(data, data + numelOf(t.shape) * slot.elementBytes());
    ckpt.tensors.push_back(std::move(t));
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const Slot &slot = args[i];
    if (!isCheckpointed(slot))
      continue;
    const char *local = static_cast<const char *>(buffers[i].aligned);
    size_t element = slot.elementBytes();
    if (slot.layout.empty() && !slot.perRank) {
      add(slot, slot.role, slot.name, slot.shape, local, -1);
      continue;
    }
    std::vector<char> full;
    if (slot.perRank || slot.shardOf) {
      // Every rank's buffer, in rank order.
      full.resize(slot.bytes() * worldSize);
      check(distopt_rt_all_gather(comm, local, full.data(), slot.numel(),
                                  rtDtype(slot), rtDtype(slot)),
            "gathering the checkpoint");
    }
    if (slot.perRank) {
      for (int64_t r = 0; r < worldSize; ++r)
        add(slot, slot.role, slot.name, slot.shape,
            full.data() + r * slot.bytes(), r);
      continue;
    }
    for (const Entry &e : slot.layout) {
      std::vector<char> owned;
      const char *data = full.data() + e.offset * element;
      if (isReplicatedLayout(slot)) {
        data = local + e.offset * element;
      } else if (!slot.shardOf) {
        // Greedy: the entry is whole in its owner's buffer.
        owned.resize(numelOf(e.shape) * element);
        check(distopt_rt_broadcast(comm, local + e.offset * element,
                                   owned.data(), numelOf(e.shape),
                                   rtDtype(slot), e.owner, rtDtype(slot)),
              "gathering the checkpoint");
        data = owned.data();
      }
      add(slot, slot.role, logicalName(slot, e), e.shape, data, -1);
    }
  }
  return ckpt;
}

/// Fills every parameter, main parameter and state buffer of this rank from
/// `ckpt`, whatever world size and layout it was saved with. (The caller
/// checked first that it fits: checkpoint::checkFits. The checks here guard
/// the copies.)
void restoreCheckpoint(const checkpoint::Checkpoint &ckpt,
                       const std::string &resumePath,
                       const std::vector<Slot> &args,
                       std::vector<Buffer> &buffers) {
  std::set<const checkpoint::Tensor *> used;
  // Looked up once per layout entry: indexed, not searched (10k tensors).
  std::map<std::tuple<std::string, std::string, int64_t>,
           const checkpoint::Tensor *>
      index;
  for (const checkpoint::Tensor &t : ckpt.tensors)
    index[{t.role, t.name, t.rank}] = &t;
  auto lookup = [&](const std::string &role, const std::string &name,
                    int64_t rank) -> const checkpoint::Tensor * {
    auto it = index.find({role, name, rank});
    return it == index.end() ? nullptr : it->second;
  };
  auto find = [&](const Slot &slot, const std::string &name,
                  const std::vector<int64_t> &shape,
                  int64_t rank) -> const checkpoint::Tensor & {
    const checkpoint::Tensor *t = lookup(slot.role, name, rank);
    std::string what = "'" + slot.role + " " + name + "'";
    if (!t)
      die(resumePath + ": has no " + what + " for this step");
    if (t->dtype != slot.dtype || t->shape != shape)
      die(resumePath + ": " + what + " is " + t->dtype + " of " +
          std::to_string(t->shape.size()) + " dims / " +
          std::to_string(numelOf(t->shape)) + " elements, the step wants " +
          slot.dtype + " of " + std::to_string(numelOf(shape)) + " elements");
    used.insert(t);
    return *t;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const Slot &slot = args[i];
    if (!isCheckpointed(slot))
      continue;
    char *local = static_cast<char *>(buffers[i].aligned);
    size_t element = slot.elementBytes();
    if (slot.perRank && ckpt.worldSize != worldSize)
      die(resumePath + ": '" + slot.name +
          "' is per-rank state (PowerSGD's "
          "error feedback) saved on " +
          std::to_string(ckpt.worldSize) + " ranks; it cannot resume on " +
          std::to_string(worldSize));
    if (slot.layout.empty()) {
      const checkpoint::Tensor &t =
          find(slot, slot.name, slot.shape, slot.perRank ? myRank : -1);
      std::memcpy(local, t.data.data(), t.data.size());
      continue;
    }
    forEachLocalRange(
        slot, [&](const Entry &e, int64_t first, int64_t at, int64_t count) {
          const checkpoint::Tensor &t =
              find(slot, logicalName(slot, e), e.shape, -1);
          std::memcpy(local + at * element, t.data.data() + first * element,
                      count * element);
        });
    // Entries held elsewhere are still this step's: mark them used.
    for (const Entry &e : slot.layout)
      if (const checkpoint::Tensor *t =
              lookup(slot.role, logicalName(slot, e), -1))
        used.insert(t);
  }
  for (const checkpoint::Tensor &t : ckpt.tensors)
    if (!used.count(&t) && (t.rank < 0 || t.rank == myRank))
      die(resumePath + ": holds '" + t.role + " " + t.name +
          "', which this step does not have (a checkpoint of another model "
          "or optimizer?)");
}

} // namespace distopt::run
