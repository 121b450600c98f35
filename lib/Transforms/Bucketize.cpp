//===- Bucketize.cpp - group all_reduces into buckets -----------*- C++ -*-===//
//
// --distopt-bucketize: DDP-style gradient buckets. Works one block at a time,
// on the positions of ops in the block: a bucket is placed after the last
// definition of its inputs and must precede the first use of its results.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Transforms/Bucketing.h"
#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>

namespace mlir::distopt {
#define GEN_PASS_DEF_BUCKETIZEPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

/// What must match for two collectives to share a bucket.
struct BucketKey {
  FlatSymbolRefAttr group;
  Type elementType;
  ReductionKind reduction;
  Attribute scale;
  Attribute wireType;

  bool operator==(const BucketKey &other) const {
    return group == other.group && elementType == other.elementType &&
           reduction == other.reduction && scale == other.scale &&
           wireType == other.wireType;
  }
};

/// An op with the block positions that constrain where it can move to.
struct Candidate {
  Operation *op;
  int64_t position;
  int64_t lastDef;  // position of its operands' last definition, or -1
  int64_t firstUse; // position of its results' first user, or INT64_MAX
  int64_t bytes;
};

/// The position of every op of a block, fixed before the block changes.
class BlockPositions {
public:
  explicit BlockPositions(Block &block) : block(block) {
    for (Operation &op : block) {
      position[&op] = ops.size();
      ops.push_back(&op);
    }
  }

  /// `op` (in the block) with the positions of what it reads and what reads
  /// it; `bytes` is left at 0.
  Candidate candidate(Operation *op) const {
    Candidate c{op, position.lookup(op), -1,
                std::numeric_limits<int64_t>::max(), 0};
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        if (Operation *inBlock = block.findAncestorOpInBlock(*def))
          c.lastDef = std::max(c.lastDef, position.lookup(inBlock));
    for (Operation *user : op->getUsers())
      if (Operation *inBlock = block.findAncestorOpInBlock(*user))
        c.firstUse = std::min(c.firstUse, position.lookup(inBlock));
    return c;
  }

  Operation *at(int64_t index) const { return ops[index]; }

private:
  Block &block;
  llvm::DenseMap<Operation *, int64_t> position;
  SmallVector<Operation *> ops;
};

struct Bucket {
  SmallVector<Candidate *> members;
  llvm::SmallPtrSet<Operation *, 8> memberOps;
  int64_t bytes = 0;
  int64_t lastDef = -1;
  int64_t firstMember = std::numeric_limits<int64_t>::max();
  int64_t firstUse = std::numeric_limits<int64_t>::max();

  /// Where the bucket goes: after every input, not before its first member.
  int64_t insertionPosition() const {
    return std::max(lastDef + 1, firstMember);
  }
  bool canAdd(const Candidate &c) const {
    int64_t place = std::max(std::max(lastDef, c.lastDef) + 1,
                             std::min(firstMember, c.position));
    return place <= std::min(firstUse, c.firstUse) && !feeds(c);
  }
  /// Whether `c` reads a member's result or a member reads `c`'s: the
  /// positions alone allow that (a member is not at the bucket's place),
  /// but the two cannot be in one collective.
  bool feeds(const Candidate &c) const {
    return llvm::any_of(c.op->getOperands(),
                        [&](Value v) {
                          return memberOps.contains(v.getDefiningOp());
                        }) ||
           llvm::any_of(c.op->getUsers(), [&](Operation *user) {
             return memberOps.contains(user);
           });
  }
  void add(Candidate &c) {
    members.push_back(&c);
    memberOps.insert(c.op);
    bytes += c.bytes;
    lastDef = std::max(lastDef, c.lastDef);
    firstMember = std::min(firstMember, c.position);
    firstUse = std::min(firstUse, c.firstUse);
  }
};

struct OpenBuckets {
  BucketKey key;
  double firstCapBytes;
  double capBytes;
  Bucket current;
  unsigned closed = 0; // buckets of this key closed so far
};

BucketKey keyOf(Operation *collective) {
  auto op = cast<AllReduceOp>(collective);
  return {op.getGroupAttr(),
          cast<RankedTensorType>(op.getType()).getElementType(),
          op.getReduction(), op.getScaleAttr(), op.getWireTypeAttr()};
}

} // namespace

int64_t mlir::distopt::bucketCountForLink(double totalBytes,
                                          double latencySeconds,
                                          double bytesPerSecond) {
  double count = std::sqrt(totalBytes / (latencySeconds * bytesPerSecond));
  // Beyond any real number of tensors; keeps the conversion defined.
  return std::clamp<int64_t>(std::llround(std::min(count, 1e15)), 1,
                             std::numeric_limits<int64_t>::max());
}

/// Emits one bucket before `insertBefore` and redirects its members' uses.
static void emitBucket(Bucket &bucket, Operation *insertBefore,
                       int64_t alignment);

namespace {
struct Placement {
  Bucket *bucket;
  int64_t place; // the bucket goes before the op at this position
};
} // namespace

/// Where the buckets go, in the order to emit them, from the place each
/// would take alone (`preferred`). A member that reads another bucket's
/// member reads it where that bucket goes, so its own bucket goes there or
/// later; a bucket that then comes after its first use, or that would wait
/// for itself through others, is left out (in `dropped`: its members stay
/// where they are). Buckets placed before the same op go producers first.
static SmallVector<Placement> placeBuckets(ArrayRef<Bucket *> buckets,
                                           ArrayRef<int64_t> preferred,
                                           SmallVectorImpl<Bucket *> &dropped) {
  size_t n = buckets.size();
  llvm::DenseMap<Operation *, size_t> bucketOf;
  for (auto [i, bucket] : llvm::enumerate(buckets))
    for (Candidate *member : bucket->members)
      bucketOf[member->op] = i;
  SmallVector<SmallVector<size_t>> producers(n);
  for (auto [i, bucket] : llvm::enumerate(buckets))
    for (Candidate *member : bucket->members)
      for (Value operand : member->op->getOperands())
        if (Operation *def = operand.getDefiningOp()) {
          auto it = bucketOf.find(def);
          if (it != bucketOf.end() && it->second != i)
            producers[i].push_back(it->second);
        }
  SmallVector<int64_t> place(preferred);
  SmallVector<size_t> depth(n, 0); // the longest chain of producers
  SmallVector<bool> kept(n, true);
  // Places and depths only grow, and a depth beyond n is a cycle: this ends.
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < n; ++i) {
      if (!kept[i])
        continue;
      int64_t at = place[i];
      size_t chain = 0;
      for (size_t j : producers[i])
        if (kept[j]) {
          at = std::max(at, place[j]);
          chain = std::max(chain, depth[j] + 1);
        }
      if (at > buckets[i]->firstUse || chain > n) {
        kept[i] = false;
        dropped.push_back(buckets[i]);
        changed = true;
      } else if (at != place[i] || chain != depth[i]) {
        place[i] = at;
        depth[i] = chain;
        changed = true;
      }
    }
  }
  SmallVector<size_t> order;
  for (size_t i = 0; i < n; ++i)
    if (kept[i])
      order.push_back(i);
  llvm::stable_sort(order, [&](size_t a, size_t b) {
    return std::tie(place[a], depth[a]) < std::tie(place[b], depth[b]);
  });
  return llvm::map_to_vector(
      order, [&](size_t i) { return Placement{buckets[i], place[i]}; });
}

BucketingResult
mlir::distopt::bucketizeBlock(Block &block,
                              llvm::function_ref<bool(AllReduceOp)> select,
                              const BucketingOptions &options) {
  BucketingResult result;
  BlockPositions positions(block);
  SmallVector<Candidate> candidates;
  for (Operation &op : block) {
    auto allReduce = dyn_cast<AllReduceOp>(&op);
    if (!allReduce || !select(allReduce))
      continue;
    Candidate c = positions.candidate(allReduce);
    auto type = cast<RankedTensorType>(allReduce.getType());
    c.bytes = getShapedBytes(type);
    candidates.push_back(c);
  }
  if (candidates.size() < 2)
    return result;
  if (options.reverse)
    std::reverse(candidates.begin(), candidates.end());

  bool fromLink = options.latencySeconds > 0 && options.bytesPerSecond > 0;
  // With a link model, the n buckets of a kind share its bytes evenly.
  auto linkCap = [&](const BucketKey &key) {
    double total = 0;
    for (const Candidate &c : candidates)
      if (keyOf(c.op) == key)
        total += c.bytes;
    return total / bucketCountForLink(total, options.latencySeconds,
                                      options.bytesPerSecond);
  };

  SmallVector<OpenBuckets> open;
  SmallVector<Bucket> done;
  auto close = [&](OpenBuckets &entry) {
    if (!entry.current.members.empty())
      done.push_back(std::move(entry.current));
    entry.current = Bucket();
    ++entry.closed;
  };
  for (Candidate &c : candidates) {
    BucketKey key = keyOf(c.op);
    auto it = llvm::find_if(
        open, [&](const OpenBuckets &entry) { return entry.key == key; });
    if (it == open.end()) {
      double cap = fromLink ? linkCap(key) : options.capBytes;
      open.push_back(
          {key, fromLink ? cap : options.firstCapBytes, cap, Bucket(), 0});
      it = std::prev(open.end());
    }
    auto cap = [&] {
      return it->closed == 0 ? it->firstCapBytes : it->capBytes;
    };
    // A collective as large as a (later) bucket's cap would fill one
    // alone: it stays as it is, so its tensor is not copied into a bucket
    // and out again, and the open bucket stays open for the smaller ones
    // around it (DDP would add it and close the bucket).
    if (static_cast<double>(c.bytes) >= it->capBytes)
      continue;
    if (!it->current.members.empty() && !it->current.canAdd(c))
      close(*it);
    it->current.add(c);
    if (static_cast<double>(it->current.bytes) >= cap())
      close(*it);
  }
  for (OpenBuckets &entry : open)
    close(entry);

  // Place all buckets before touching the block: positions refer to the
  // original ops, which stay until the end. Buckets are issued in the order
  // they were formed (DDP's first bucket first) unless a later bucket's
  // results are needed sooner.
  SmallVector<Bucket *> buckets;
  SmallVector<int64_t> preferred;
  int64_t previous = 0;
  for (Bucket &bucket : done) {
    if (bucket.members.size() < 2)
      continue;
    int64_t place = std::max(bucket.insertionPosition(), previous);
    if (place > bucket.firstUse)
      place = bucket.insertionPosition();
    previous = place;
    buckets.push_back(&bucket);
    preferred.push_back(place);
  }
  SmallVector<Bucket *> dropped; // their collectives stay as they are
  SmallVector<Placement> placed = placeBuckets(buckets, preferred, dropped);
  for (Placement &p : placed) {
    emitBucket(*p.bucket, positions.at(p.place), options.alignment);
    ++result.buckets;
    result.bucketed += p.bucket->members.size();
  }
  for (Placement &p : placed)
    for (Candidate *member : p.bucket->members)
      member->op->erase();
  return result;
}

SmallVector<OpBatch> mlir::distopt::batchOps(
    Block &block, function_ref<bool(Operation *)> isMember,
    function_ref<std::optional<BatchKey>(Operation *)> keyOf) {
  BlockPositions positions(block);
  SmallVector<Candidate> candidates;
  for (Operation &op : block)
    if (isMember(&op))
      candidates.push_back(positions.candidate(&op));
  // Buckets point into `candidates`, complete from here on.
  SmallVector<Bucket> done;
  SmallVector<std::optional<BatchKey>> keys;
  for (Candidate &c : candidates) {
    keys.push_back(keyOf(c.op));
    if (!keys.back()) // alone, where it is
      done.emplace_back().add(c);
  }
  // In program order, one open batch per key: a member that has no place in
  // common with the open batch closes it.
  SmallVector<std::pair<BatchKey, Bucket>> open;
  for (auto [c, key] : llvm::zip_equal(candidates, keys)) {
    if (!key)
      continue;
    auto it =
        llvm::find_if(open, [&](auto &entry) { return entry.first == *key; });
    if (it == open.end()) {
      open.push_back({*key, Bucket()});
      it = std::prev(open.end());
    } else if (!it->second.canAdd(c)) {
      done.push_back(std::move(it->second));
      it->second = Bucket();
    }
    it->second.add(c);
  }
  for (auto &entry : open)
    done.push_back(std::move(entry.second));
  // A batch left out by the placement falls apart into ops alone (each of
  // which has a place: where it is).
  std::deque<Bucket> singles;
  SmallVector<Placement> placed;
  SmallVector<Bucket *> buckets =
      llvm::map_to_vector(done, [](Bucket &bucket) { return &bucket; });
  while (true) {
    SmallVector<int64_t> preferred = llvm::map_to_vector(
        buckets, [](Bucket *bucket) { return bucket->insertionPosition(); });
    SmallVector<Bucket *> dropped;
    placed = placeBuckets(buckets, preferred, dropped);
    if (dropped.empty())
      break;
    for (Bucket *bucket : dropped) {
      llvm::erase(buckets, bucket);
      for (Candidate *member : bucket->members) {
        singles.emplace_back().add(*member);
        buckets.push_back(&singles.back());
      }
    }
  }
  SmallVector<OpBatch> batches;
  for (Placement &p : placed) {
    OpBatch &batch = batches.emplace_back();
    for (Candidate *member : p.bucket->members)
      batch.members.push_back(member->op);
    batch.insertBefore = positions.at(p.place);
  }
  return batches;
}

void mlir::distopt::numberBatches(
    ArrayRef<Operation *> ops,
    function_ref<std::pair<Attribute, Type>(Operation *)> keyOf,
    function_ref<double(Operation *)> bytesOf, double capBytes, int64_t &next,
    function_ref<void(Operation *, int64_t)> setBatch) {
  struct OpenBatch {
    std::pair<Attribute, Type> key;
    int64_t number;
    double bytes;
  };
  SmallVector<OpenBatch> open;
  for (Operation *op : ops) {
    std::pair<Attribute, Type> key = keyOf(op);
    double bytes = bytesOf(op);
    auto it = llvm::find_if(
        open, [&](const OpenBatch &batch) { return batch.key == key; });
    if (it == open.end()) {
      open.push_back({key, next++, 0});
      it = std::prev(open.end());
    } else if (it->bytes + bytes > capBytes) { // full: the next one opens
      *it = {key, next++, 0};
    }
    it->bytes += bytes;
    setBatch(op, it->number);
  }
}

SmallVector<PowerSGDBatch> mlir::distopt::batchPowerSGD(Block &block) {
  SmallVector<PowerSGDBatch> batches;
  for (OpBatch &batch : batchOps(
           block, [](Operation *op) { return isa<PowerSGDAllReduceOp>(op); },
           [](Operation *op) -> std::optional<BatchKey> {
             auto powersgd = cast<PowerSGDAllReduceOp>(op);
             if (!powersgd.getBatch())
               return std::nullopt;
             return BatchKey{static_cast<int64_t>(*powersgd.getBatch()),
                             powersgd.getGroupAttr(),
                             powersgd.getP().getType().getElementType()};
           }))
    batches.push_back(
        {llvm::map_to_vector(
             batch.members,
             [](Operation *op) { return cast<PowerSGDAllReduceOp>(op); }),
         batch.insertBefore});
  return batches;
}

SmallVector<OpBatch> mlir::distopt::batchDionSync(Block &block) {
  return batchOps(
      block,
      [](Operation *op) {
        auto dion = dyn_cast<DionUpdateOp>(op);
        return dion && dion.getGroupAttr() && dion.getBatch();
      },
      [](Operation *op) -> std::optional<BatchKey> {
        auto dion = cast<DionUpdateOp>(op);
        return BatchKey{static_cast<int64_t>(*dion.getBatch()),
                        dion.getGroupAttr(), dion.getFactorElementType()};
      });
}

static void emitBucket(Bucket &bucket, Operation *insertBefore,
                       int64_t alignment) {
  auto first = cast<AllReduceOp>(bucket.members.front()->op);
  OpBuilder builder(insertBefore);
  SmallVector<Location> locs;
  SmallVector<Value> inputs;
  SmallVector<Type> types;
  for (Candidate *member : bucket.members) {
    auto op = cast<AllReduceOp>(member->op);
    locs.push_back(op.getLoc());
    inputs.push_back(op.getInput());
    types.push_back(op.getType());
  }
  Location loc = builder.getFusedLoc(locs);
  int64_t packed;
  computeBucketOffsets(types, alignment, &packed);
  auto elementType = cast<RankedTensorType>(types.front()).getElementType();
  auto bucketType = RankedTensorType::get({packed}, elementType);

  auto pack = BucketPackOp::create(builder, loc, bucketType, inputs,
                                   builder.getI64IntegerAttr(alignment));
  auto reduced = AllReduceOp::create(
      builder, loc, bucketType, pack, first.getGroupAttr(),
      first.getWireTypeAttr(), first.getReductionAttr(), first.getScaleAttr());
  auto unpack = BucketUnpackOp::create(builder, loc, types, reduced,
                                       builder.getI64IntegerAttr(alignment));
  for (auto [member, result] :
       llvm::zip_equal(bucket.members, unpack.getResults()))
    member->op->getResult(0).replaceAllUsesWith(result);
}

namespace {

struct BucketizePass : public distopt::impl::BucketizePassBase<BucketizePass> {
  using BucketizePassBase::BucketizePassBase;

  LogicalResult initialize(MLIRContext *context) override {
    Location loc = UnknownLoc::get(context);
    if (!(capMb > 0))
      return emitError(loc) << "--distopt-bucketize: cap-mb must be positive, "
                               "got "
                            << capMb.getValue();
    if (!(firstBucketCapMb > 0))
      return emitError(loc) << "--distopt-bucketize: first-bucket-cap-mb must "
                               "be positive, got "
                            << firstBucketCapMb.getValue();
    if (!std::isfinite(latencyUs) || latencyUs < 0 ||
        !std::isfinite(bandwidthGbPerS) || bandwidthGbPerS < 0)
      return emitError(loc) << "--distopt-bucketize: latency-us and "
                               "bandwidth-gb-per-s must be finite and not "
                               "negative";
    if ((latencyUs > 0) != (bandwidthGbPerS > 0))
      return emitError(loc)
             << "--distopt-bucketize: latency-us and bandwidth-gb-per-s go "
                "together (distopt-calibrate prints both)";
    // The link model chooses the caps; a cap given as well would be ignored.
    if (latencyUs > 0 && (capMb.hasValue() || firstBucketCapMb.hasValue()))
      return emitError(loc)
             << "--distopt-bucketize: give cap-mb and first-bucket-cap-mb, "
                "or latency-us and bandwidth-gb-per-s, not both";
    if (alignment < 1 || !llvm::isPowerOf2_64(alignment))
      return emitError(loc) << "--distopt-bucketize: alignment must be a "
                               "positive power of two, got "
                            << alignment.getValue();
    return success();
  }

  void runOnOperation() override {
    BucketingOptions options;
    options.capBytes = capMb * (1 << 20);
    options.firstCapBytes = firstBucketCapMb * (1 << 20);
    options.reverse = reverse;
    options.alignment = alignment;
    options.latencySeconds = latencyUs * 1e-6;
    options.bytesPerSecond = bandwidthGbPerS * 1e9;
    SmallVector<Block *> blocks;
    getOperation().walk([&](Block *block) { blocks.push_back(block); });
    for (Block *block : blocks) {
      // A collective that already reduces a bucket stays as it is.
      BucketingResult result = bucketizeBlock(
          *block,
          [](AllReduceOp op) {
            return !op.getInput().getDefiningOp<BucketPackOp>();
          },
          options);
      numBuckets += result.buckets;
      numBucketed += result.bucketed;
    }
  }
};

} // namespace
