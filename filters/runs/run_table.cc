#include "filters/runs/run_table.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace sluice {

namespace {

constexpr std::chrono::seconds kSweepInterval{1};

double secondsOf(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

/** Adds `usd` to `spend`, never below 0 (one atomic step: a lock-free adder may race it). */
void addClamped(std::atomic<double>& spend, double usd) {
  double now = spend.load(std::memory_order_relaxed);
  while (!spend.compare_exchange_weak(now, std::max(0.0, now + usd), std::memory_order_relaxed)) {
  }
}

}  // namespace

void RunTable::setLimits(Limits limits) {
  std::lock_guard lock(mutex_);
  limits_ = limits;
}

void RunTable::setEndingListener(EndingListener listener) {
  std::lock_guard lock(mutex_);
  on_ending_ = std::move(listener);
}

void RunTable::setCancelBroadcaster(std::function<void(const std::string&)> broadcaster) {
  std::lock_guard lock(mutex_);
  broadcaster_ = std::move(broadcaster);
}

void RunTable::setFleet(std::shared_ptr<Fleet> fleet) {
  std::lock_guard lock(mutex_);
  fleet_ = std::move(fleet);
}

void RunTable::setActiveListener(std::function<void(size_t)> listener) {
  std::lock_guard lock(mutex_);
  on_active_ = std::move(listener);
  if (on_active_) on_active_(active_);
}

void RunTable::setActiveLocked(size_t active) {
  active_ = active;
  if (on_active_) on_active_(active_);
}

RunTable::Run& RunTable::createLocked(const std::string& id, MonotonicTime now) {
  if (runs_.size() >= limits_.max_runs) sweepLocked(now, true);
  while (runs_.size() >= limits_.max_runs && idle_head_ != nullptr) {
    // Full: the longest-idle run without tasks in flight is forgotten first.
    const std::string victim = idle_head_->id;
    eraseLocked(victim);
  }
  Run& run = runs_[id];
  run.id = id;
  run.created = run.last_active = run.last_flush = now;
  run.deadline = now + limits_.budget;
  run.max_usd = limits_.max_usd;
  touchIdleLocked(run);
  return run;
}

void RunTable::checkDeadlineLocked(Run& run, MonotonicTime now, std::vector<Ending>& endings) {
  if (run.state != State::Running || now < run.deadline) return;
  run.state = State::DeadlineExceeded;
  run.ended = run.deadline;
  endings.push_back(Ending::Deadline);
}

void RunTable::touchIdleLocked(Run& run) {
  dropFromIdleLocked(run);
  // A run whose tasks wait for the fleet's answer is never forgotten meanwhile.
  if (!run.tasks.empty() || run.checking) return;
  run.idle_prev = idle_tail_;
  run.idle_next = nullptr;
  (idle_tail_ != nullptr ? idle_tail_->idle_next : idle_head_) = &run;
  idle_tail_ = &run;
  run.in_lru = true;
}

void RunTable::dropFromIdleLocked(Run& run) {
  if (!run.in_lru) return;
  (run.idle_prev != nullptr ? run.idle_prev->idle_next : idle_head_) = run.idle_next;
  (run.idle_next != nullptr ? run.idle_next->idle_prev : idle_tail_) = run.idle_prev;
  run.idle_prev = run.idle_next = nullptr;
  run.in_lru = false;
}

bool RunTable::expiredLocked(const Run& run, MonotonicTime now) const {
  if (!run.tasks.empty()) return false;
  if (run.state != State::Running) return now - run.ended >= limits_.tombstone;
  // Past its deadline it refuses tasks like a tombstone; before, it is idle.
  if (now >= run.deadline) return now - run.deadline >= limits_.tombstone;
  return now - run.last_active >= limits_.idle_expiry;
}

void RunTable::sweepLocked(MonotonicTime now, bool force) {
  if (!force && now - last_sweep_ < kSweepInterval) return;
  last_sweep_ = now;
  // Oldest activity first; stops at the first run still wanted (an expired
  // run behind it goes on a later sweep, or when the table is full).
  while (idle_head_ != nullptr && expiredLocked(*idle_head_, now)) {
    const std::string id = idle_head_->id;
    eraseLocked(id);
  }
}

void RunTable::eraseLocked(const std::string& id) {
  const auto it = runs_.find(id);
  if (it == runs_.end()) return;
  Run& run = it->second;
  dropFromIdleLocked(run);
  if (!run.parent.empty()) {
    const auto parent = runs_.find(run.parent);
    if (parent != runs_.end()) {
      auto& siblings = parent->second.children;
      siblings.erase(std::remove(siblings.begin(), siblings.end(), id), siblings.end());
    }
  }
  runs_.erase(it);
}

RunTable::Join RunTable::join(const std::string& id, const std::string& parent,
                              std::optional<std::chrono::milliseconds> budget, Canceller canceller,
                              std::optional<double> max_usd) {
  return joinTask(id, parent, budget, &canceller, nullptr, max_usd);
}

RunTable::Join RunTable::join(const std::string& id, const std::string& parent,
                              std::optional<std::chrono::milliseconds> budget, TaskOwner& owner,
                              std::optional<double> max_usd) {
  return joinTask(id, parent, budget, nullptr, &owner, max_usd);
}

RunTable::Join RunTable::joinTask(const std::string& id, const std::string& parent,
                                  std::optional<std::chrono::milliseconds> budget,
                                  Canceller* canceller, TaskOwner* owner,
                                  std::optional<double> max_usd) {
  std::vector<Ending> endings;
  Join out;
  std::shared_ptr<Fleet> lookup;  // set: this join created the run, ask the fleet about it
  std::string lookup_parent;
  {
    std::lock_guard lock(mutex_);
    const MonotonicTime now = clock_.now();
    if (now - last_sweep_ >= kSweepInterval) sweepLocked(now, false);
    auto it = runs_.find(id);
    if (it == runs_.end()) {
      Run* parent_run = nullptr;
      if (!parent.empty() && parent != id) {
        auto p = runs_.find(parent);
        parent_run = p != runs_.end() ? &p->second : &createLocked(parent, now);
        checkDeadlineLocked(*parent_run, now, endings);
      }
      Run& run = createLocked(id, now);
      if (budget) run.deadline = std::min(run.deadline, now + *budget);
      if (max_usd && *max_usd > 0 && (run.max_usd == 0 || *max_usd < run.max_usd)) {
        run.max_usd = *max_usd;
      }
      if (parent_run != nullptr) {
        // (createLocked may have evicted idle runs, never the parent just
        // looked up: it is the most recently touched.)
        parent_run = &runs_.at(parent);
        run.parent = parent;
        parent_run->children.push_back(id);
        parent_run->last_active = now;
        touchIdleLocked(*parent_run);
        run.deadline = std::min(run.deadline, parent_run->deadline);
        if (parent_run->state != State::Running) {
          run.state =
              parent_run->state == State::SpendExhausted ? State::SpendExhausted : State::Cancelled;
          run.ended = now;
        }
      }
      it = runs_.find(id);
      if (fleet_) {
        // New here: its tasks wait for one lookup in the fleet.
        it->second.checking = true;
        lookup = fleet_;
        lookup_parent = it->second.parent;
      }
    }
    Run& run = it->second;
    run.last_active = now;
    checkDeadlineLocked(run, now, endings);
    if (run.checking) {
      out.kind = Join::Kind::Pending;
    } else if (run.state == State::Running) {
      out.task = next_task_++;
      out.deadline = run.deadline;
      out.run = &run;
      out.spend_alone = !fleet_ && run.max_usd == 0 && run.parent.empty();
      if (run.tasks.empty()) setActiveLocked(active_ + 1);
      Task& task = run.tasks.emplace_back();
      task.id = out.task;
      if (canceller != nullptr) task.canceller = std::move(*canceller);
      task.owner = owner;
      ++run.tasks_total;
    } else {
      out.kind = run.state == State::Cancelled        ? Join::Kind::Cancelled
                 : run.state == State::SpendExhausted ? Join::Kind::SpendExhausted
                                                      : Join::Kind::DeadlineExceeded;
    }
    touchIdleLocked(run);
  }
  notify(endings);
  if (lookup) {
    lookup->lookup(id, lookup_parent, [weak = weak_from_this(), id](const Fleet::Known& known) {
      if (const auto self = weak.lock()) self->onLookup(id, known);
    });
  }
  return out;
}

bool RunTable::awaitFleet(const std::string& id, std::function<void()> waiter) {
  std::lock_guard lock(mutex_);
  const auto it = runs_.find(id);
  if (it == runs_.end() || !it->second.checking) return false;
  it->second.waiters.push_back(std::move(waiter));
  return true;
}

void RunTable::onLookup(const std::string& id, const Fleet::Known& known) {
  std::vector<Told> cancellers;
  std::vector<Ending> endings;
  std::vector<std::function<void()>> waiters;
  {
    std::lock_guard lock(mutex_);
    const MonotonicTime now = clock_.now();
    const auto found = runs_.find(id);
    if (found == runs_.end() || !found->second.checking) return;
    const auto stateOf = [](Ending e) {
      return e == Ending::SpendCap ? State::SpendExhausted : State::Cancelled;
    };
    // (The run is not forgotten while it is checking: endSubtreeLocked may
    // create and evict runs, never this one.)
    const std::string parent = found->second.parent;
    if (known.parent_ended && !parent.empty()) {
      endSubtreeLocked(parent, stateOf(*known.parent_ended), *known.parent_ended, now, cancellers,
                       endings);
    }
    if (known.ended)
      endSubtreeLocked(id, stateOf(*known.ended), *known.ended, now, cancellers, endings);
    Run& run = runs_.at(id);
    run.checking = false;
    waiters.swap(run.waiters);
    if (fleetCountsLocked(run)) {
      run.fleet_usd = known.spend_usd;
      run.spend_usd = std::max(0.0, run.fleet_usd + run.sent_usd + run.unflushed_usd);
      if (run.state == State::Running && run.spend_usd >= run.max_usd) {
        endSubtreeLocked(id, State::SpendExhausted, Ending::SpendCap, now, cancellers, endings);
      }
    }
    touchIdleLocked(runs_.at(id));
  }
  notify(endings);
  for (const Told& told : cancellers) told();
  for (auto& waiter : waiters) waiter();
}

void RunTable::collectFlushLocked(Run& run, MonotonicTime now, bool force,
                                  std::vector<Flush>& flushes) {
  if (run.unflushed_usd == 0) return;
  const double threshold = run.max_usd * kFleetFlushShare;
  if (!force && std::abs(run.unflushed_usd) < threshold &&
      now - run.last_flush < kFleetFlushInterval) {
    return;
  }
  flushes.push_back(Flush{run.id, run.unflushed_usd});
  run.sent_usd += run.unflushed_usd;
  run.unflushed_usd = 0;
  run.last_flush = now;
}

void RunTable::sendFlushes(std::vector<Flush>& flushes) {
  if (flushes.empty()) return;
  std::shared_ptr<Fleet> fleet;
  std::chrono::milliseconds ttl{};
  {
    std::lock_guard lock(mutex_);
    fleet = fleet_;
    ttl = limits_.idle_expiry;
  }
  if (!fleet) return;
  for (Flush& f : flushes) {
    const double usd = f.usd;
    fleet->addSpend(f.id, usd, ttl,
                    [weak = weak_from_this(), id = f.id, usd](std::optional<double> total) {
                      if (const auto self = weak.lock()) self->onFlushed(id, usd, total);
                    });
  }
}

void RunTable::onFlushed(const std::string& id, double usd, std::optional<double> total) {
  std::vector<Told> cancellers;
  std::vector<Ending> endings;
  std::shared_ptr<Fleet> tell;
  std::chrono::milliseconds ttl{};
  {
    std::lock_guard lock(mutex_);
    const auto it = runs_.find(id);
    if (it == runs_.end()) return;
    Run& run = it->second;
    run.sent_usd -= usd;
    if (total) {
      // One connection carries this process's additions in order: the total
      // counts every one answered so far, this one included.
      run.fleet_usd = *total;
    } else {
      run.unflushed_usd += usd;  // not added: sent again with the next flush
    }
    if (!fleetCountsLocked(run)) return;
    run.spend_usd = std::max(0.0, run.fleet_usd + run.sent_usd + run.unflushed_usd);
    if (run.state == State::Running && run.spend_usd >= run.max_usd) {
      endSubtreeLocked(id, State::SpendExhausted, Ending::SpendCap, clock_.now(), cancellers,
                       endings);
      tell = fleet_;
      ttl = limits_.tombstone;
    }
  }
  notify(endings);
  for (const Told& told : cancellers) told();
  if (tell) tell->ended(id, Ending::SpendCap, ttl);
}

void RunTable::leave(const std::string& id, uint64_t task) {
  std::unique_lock lock(mutex_);
  const auto it = runs_.find(id);
  if (it == runs_.end()) return;
  leaveRun(it->second, task, lock);
}

void RunTable::leave(const Join& task) {
  if (task.run == nullptr) return;
  std::unique_lock lock(mutex_);
  leaveRun(*task.run, task.task, lock);
}

void RunTable::leaveRun(Run& run, uint64_t task, std::unique_lock<std::mutex>& lock) {
  const auto t = std::find_if(run.tasks.begin(), run.tasks.end(),
                              [task](const Task& entry) { return entry.id == task; });
  if (t == run.tasks.end()) return;
  if (t != run.tasks.end() - 1) *t = std::move(run.tasks.back());
  run.tasks.pop_back();
  const MonotonicTime now = clock_.now();
  run.last_active = now;
  if (run.tasks.empty()) setActiveLocked(active_ - 1);
  touchIdleLocked(run);
  if (!fleet_) return;
  // A task ended: what it spent goes to the fleet now (the run's and its ancestors').
  std::vector<Flush> flushes;
  Run* r = &run;
  for (size_t steps = 0; r != nullptr && steps <= limits_.max_runs; ++steps) {
    if (fleetCountsLocked(*r)) collectFlushLocked(*r, now, true, flushes);
    r = parentLocked(*r);
  }
  lock.unlock();
  sendFlushes(flushes);
}

RunTable::Run* RunTable::parentLocked(const Run& run) {
  if (run.parent.empty()) return nullptr;
  const auto it = runs_.find(run.parent);
  return it != runs_.end() ? &it->second : nullptr;
}

void RunTable::endSubtreeLocked(const std::string& id, State state, Ending ending,
                                MonotonicTime now, std::vector<Told>& cancellers,
                                std::vector<Ending>& endings) {
  // The run and its descendants, breadth first (a cycle of parents cannot
  // form: a run's parent is set once, at its creation, to an existing run
  // or a new one; the visited set guards anyway).
  std::vector<std::string> pending{id};
  std::unordered_set<std::string> visited;
  while (!pending.empty()) {
    const std::string current = std::move(pending.back());
    pending.pop_back();
    if (!visited.insert(current).second) continue;
    auto it = runs_.find(current);
    if (it == runs_.end()) it = runs_.find(createLocked(current, now).id);
    Run& run = it->second;
    checkDeadlineLocked(run, now, endings);
    if (run.state == State::Running) {
      run.state = state;
      run.ended = now;
      endings.push_back(ending);
    }
    run.last_active = now;
    for (const Task& task : run.tasks) {
      // A task's owner is alive until it leaves (under this lock).
      if (task.owner != nullptr) {
        cancellers.push_back(Told{nullptr, task.owner->canceller(), ending});
      } else if (task.canceller) {
        cancellers.push_back(Told{task.canceller, nullptr, ending});
      }
    }
    touchIdleLocked(run);
    for (const std::string& child : run.children) pending.push_back(child);
  }
}

size_t RunTable::cancel(const std::string& id, bool from_peer) {
  return end(id, State::Cancelled, Ending::Cancelled, !from_peer);
}

size_t RunTable::capFromPeer(const std::string& id) {
  return end(id, State::SpendExhausted, Ending::SpendCap, false);
}

size_t RunTable::end(const std::string& id, State state, Ending ending, bool tell_fleet) {
  std::vector<Told> cancellers;
  std::vector<Ending> endings;
  std::function<void(const std::string&)> broadcaster;
  std::shared_ptr<Fleet> fleet;
  std::chrono::milliseconds ttl{};
  {
    std::lock_guard lock(mutex_);
    if (tell_fleet) {
      fleet = fleet_;
      if (!fleet) broadcaster = broadcaster_;
      ttl = limits_.tombstone;
    }
    const MonotonicTime now = clock_.now();
    sweepLocked(now, false);
    endSubtreeLocked(id, state, ending, now, cancellers, endings);
  }
  // The other replicas first: the fleet's message then leaves ahead of this
  // process's own cuts (which may be work on the very loop that sends it),
  // and the peers cut theirs meanwhile.
  if (fleet) fleet->ended(id, ending, ttl);
  if (broadcaster) broadcaster(id);
  notify(endings);
  for (const Told& told : cancellers) told();
  return cancellers.size();
}

std::vector<std::string> RunTable::running(size_t max) const {
  std::vector<std::string> out;
  std::lock_guard lock(mutex_);
  const MonotonicTime now = clock_.now();
  for (const auto& [id, run] : runs_) {
    if (out.size() >= max) break;
    if (run.state == State::Running && !run.checking && now < run.deadline) out.push_back(id);
  }
  return out;
}

size_t RunTable::endedInFleet(const std::string& id, Ending why) {
  {
    std::lock_guard lock(mutex_);
    const auto it = runs_.find(id);
    // Ended here already (a cancel heard meanwhile): its tasks were told.
    if (it == runs_.end() || it->second.state != State::Running) return 0;
  }
  return why == Ending::SpendCap ? capFromPeer(id) : cancel(id, /*from_peer=*/true);
}

void RunTable::addSpend(const std::string& id, double usd) {
  if (usd == 0) return;
  std::unique_lock lock(mutex_);
  const auto it = runs_.find(id);
  if (it == runs_.end()) return;
  addSpendFrom(it->second, usd, lock);
}

void RunTable::addSpend(const Join& task, double usd) {
  if (usd == 0 || task.run == nullptr) return;
  if (task.spend_alone) {
    // No cap to check, no ancestor or fleet to tell.
    addClamped(task.run->spend_usd, usd);
    return;
  }
  std::unique_lock lock(mutex_);
  addSpendFrom(*task.run, usd, lock);
}

void RunTable::addSpendFrom(Run& first, double usd, std::unique_lock<std::mutex>& lock) {
  const MonotonicTime now = clock_.now();
  // Spend booked after the run's last task left: flush now.
  const bool task_ended = first.tasks.empty();
  std::vector<Flush> flushes;
  // The run, then its ancestors (bounded: parents never form a cycle, and
  // the walk stops at max_runs steps regardless); the topmost run that
  // reached its cap: its subtree holds the others.
  Run* capped = nullptr;
  Run* run = &first;
  for (size_t steps = 0; run != nullptr && steps <= limits_.max_runs; ++steps) {
    if (fleetCountsLocked(*run)) {
      run->unflushed_usd += usd;
      run->spend_usd = std::max(0.0, run->fleet_usd + run->sent_usd + run->unflushed_usd);
      collectFlushLocked(*run, now, task_ended, flushes);
    } else {
      addClamped(run->spend_usd, usd);
    }
    if (run->state == State::Running && run->max_usd > 0 && run->spend_usd >= run->max_usd) {
      capped = run;
    }
    run = parentLocked(*run);
  }
  if (capped == nullptr) {
    if (flushes.empty()) return;
    lock.unlock();
    sendFlushes(flushes);
    return;
  }
  std::vector<Told> cancellers;
  std::vector<Ending> endings;
  const std::string capped_id = capped->id;
  endSubtreeLocked(capped_id, State::SpendExhausted, Ending::SpendCap, now, cancellers, endings);
  const std::shared_ptr<Fleet> tell = fleet_;
  const std::chrono::milliseconds ttl = limits_.tombstone;
  lock.unlock();
  notify(endings);
  for (const Told& told : cancellers) told();
  if (tell) tell->ended(capped_id, Ending::SpendCap, ttl);
  sendFlushes(flushes);
}

RunTable::Snapshot RunTable::snapshotLocked(const Run& run, MonotonicTime now) const {
  Snapshot s;
  s.id = run.id;
  s.parent = run.parent;
  State state = run.state;
  if (state == State::Running && now >= run.deadline) state = State::DeadlineExceeded;
  s.state = state == State::Running          ? "running"
            : state == State::Cancelled      ? "cancelled"
            : state == State::SpendExhausted ? "spend_exhausted"
                                             : "deadline_exceeded";
  s.tasks_in_flight = run.tasks.size();
  s.tasks_total = run.tasks_total;
  s.age_seconds = secondsOf(now - run.created);
  s.time_left_seconds = state == State::Running ? secondsOf(run.deadline - now) : 0;
  s.children = run.children;
  s.spend_usd = run.spend_usd;
  s.max_usd = run.max_usd;
  return s;
}

std::vector<RunTable::Snapshot> RunTable::snapshot(size_t max) {
  std::lock_guard lock(mutex_);
  const MonotonicTime now = clock_.now();
  sweepLocked(now, false);
  std::vector<Snapshot> out;
  out.reserve(std::min(max, runs_.size()));
  for (const auto& [id, run] : runs_) {
    if (out.size() >= max) break;
    out.push_back(snapshotLocked(run, now));
  }
  std::sort(out.begin(), out.end(),
            [](const Snapshot& a, const Snapshot& b) { return a.age_seconds > b.age_seconds; });
  return out;
}

std::optional<RunTable::Snapshot> RunTable::snapshot(const std::string& id) {
  std::lock_guard lock(mutex_);
  const MonotonicTime now = clock_.now();
  sweepLocked(now, false);
  const auto it = runs_.find(id);
  if (it == runs_.end()) return std::nullopt;
  return snapshotLocked(it->second, now);
}

bool RunTable::spendExhausted(const std::string& id) const {
  std::lock_guard lock(mutex_);
  const auto it = runs_.find(id);
  return it != runs_.end() && it->second.state == State::SpendExhausted;
}

size_t RunTable::active() const {
  std::lock_guard lock(mutex_);
  return active_;
}

size_t RunTable::size() const {
  std::lock_guard lock(mutex_);
  return runs_.size();
}

void RunTable::notify(const std::vector<Ending>& endings) {
  if (endings.empty()) return;
  EndingListener listener;
  {
    std::lock_guard lock(mutex_);
    listener = on_ending_;
  }
  if (!listener) return;
  for (const Ending e : endings) listener(e);
}

}  // namespace sluice
