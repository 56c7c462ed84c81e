#include "proxy/shared_state/redis_reply_arena.h"

#include <new>

namespace sluice {

namespace {

// How deep `task` sits: 0 for a reply's root value, 1 for an element of it.
int depthOf(const redisReadTask* task) {
  int depth = 0;
  for (; task->parent != nullptr; task = task->parent) ++depth;
  return depth;
}

}  // namespace

redisReplyObjectFunctions RedisReplyArena::functions_ = {
    &RedisReplyArena::createString, &RedisReplyArena::createArray, &RedisReplyArena::createInteger,
    &RedisReplyArena::createNil, &RedisReplyArena::freeObject};

RedisReplyArena::ReaderPtr RedisReplyArena::makeReader() {
  ReaderPtr reader(redisReaderCreateWithFunctions(&functions_));
  if (reader != nullptr) reader->privdata = this;
  reset();
  return reader;
}

const redisReply* RedisReplyArena::reply(void* obj) { return &static_cast<Node*>(obj)->reply; }

void RedisReplyArena::reset() {
  used_ = 0;
  bytes_ = 0;
  if (!oversized_) return;
  oversized_ = false;
  for (size_t i = 0; i < nodes_.size() && i < kKeepNodes; ++i) {
    Node& n = *nodes_[i];
    if (n.text.capacity() > kKeepBytes) std::string().swap(n.text);
    if (n.elements.capacity() > kKeepElements) std::vector<redisReply*>().swap(n.elements);
  }
  if (nodes_.size() > kKeepNodes) nodes_.resize(kKeepNodes);
}

RedisReplyArena& RedisReplyArena::rootArena(const redisReadTask* task) {
  // hiredis gives the root task the reader's privdata; children reach it
  // through their parents.
  while (task->parent != nullptr) task = task->parent;
  return *static_cast<RedisReplyArena*>(task->privdata);
}

RedisReplyArena::Node* RedisReplyArena::take(const redisReadTask* task, int type) {
  RedisReplyArena& arena = rootArena(task);
  if (arena.used_ >= kMaxReplyValues) return nullptr;
  if (arena.used_ == arena.nodes_.size()) {
    arena.nodes_.push_back(std::make_unique<Node>());
    if (arena.nodes_.size() > kKeepNodes) arena.oversized_ = true;
  }
  Node* node = arena.nodes_[arena.used_++].get();
  node->reply = redisReply{};
  node->reply.type = type;
  if (task->parent != nullptr) {
    // The parent is an array (hiredis creates children only for arrays).
    auto* parent = static_cast<Node*>(task->parent->obj);
    parent->reply.element[task->idx] = &node->reply;
  }
  return node;
}

// The hooks are called from C: nothing may throw through them. A null
// return is hiredis's "out of memory": the reader fails.

void* RedisReplyArena::createString(const redisReadTask* task, char* str, size_t len) {
  if (len > kMaxBulkBytes) return nullptr;
  if (rootArena(task).bytes_ + len > kMaxReplyBytes) return nullptr;
  try {
    // The task's type: a string, a status or an error.
    Node* node = take(task, task->type);
    if (node == nullptr) return nullptr;
    rootArena(task).bytes_ += len;
    node->text.assign(str, len);
    if (len > kKeepBytes) rootArena(task).oversized_ = true;
    node->reply.str = node->text.data();
    node->reply.len = len;
    return node;
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

void* RedisReplyArena::createArray(const redisReadTask* task, int elements) {
  // An array's own depth counts: a root array is 1.
  if (elements > kMaxArrayElements || depthOf(task) + 1 > kMaxNesting) return nullptr;
  try {
    Node* node = take(task, REDIS_REPLY_ARRAY);
    if (node == nullptr) return nullptr;
    if (elements > 0) {
      if (static_cast<size_t>(elements) > kKeepElements) rootArena(task).oversized_ = true;
      node->elements.assign(static_cast<size_t>(elements), nullptr);
      node->reply.element = node->elements.data();
      node->reply.elements = static_cast<size_t>(elements);
    }
    return node;
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

void* RedisReplyArena::createInteger(const redisReadTask* task, long long value) {
  try {
    Node* node = take(task, REDIS_REPLY_INTEGER);
    if (node == nullptr) return nullptr;
    node->reply.integer = value;
    return node;
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

void* RedisReplyArena::createNil(const redisReadTask* task) {
  try {
    // A nil bulk string ($-1) or array (*-1): the task's type says which.
    return take(task, REDIS_REPLY_NIL);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

// hiredis frees only a reply it gives up on (a reader freed or failed in the
// middle of one): its values stay in the arena until the next reset().
void RedisReplyArena::freeObject(void*) {}

}  // namespace sluice
