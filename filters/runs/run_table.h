#pragma once

// The runs of one process (docs/design.md §9): a run is the unit a user
// stops and a deadline ends; each request carrying the run header is one of
// its tasks. One table serves every worker (a mutex guards it); a task is
// cancelled on its own worker through the canceller it registered (a
// cross-thread waker), so a cancel from the admin thread reaches every task
// of the run and of its descendant runs wherever they run.
//
// A run is created by its first task, or by a cancel that arrives before it
// (a tombstone: the cancel may beat the run's first task). Its deadline is
// fixed by its first task: `budget` from then, lowered by that task's
// `x-run-budget-ms`. A cancelled run, or one past its deadline, refuses new
// tasks until it is forgotten: `tombstone` after it ended. A run with
// nothing in flight is forgotten `idle_expiry` after its last task left.
// A run's spend (USD, as the spend filter meters its tasks, streams as their
// tokens arrive; a child run's spend counts in its ancestors' too) is bounded
// by its cap: `max_usd`, lowered by its first task's `x-run-max-usd`.
// Reaching it ends the run like a cancel (its tasks and its descendants'
// are told, with Ending::SpendCap) and refuses later tasks.
// Beyond `max_runs` the longest-idle run without tasks in flight is
// forgotten first (a run with tasks in flight is never forgotten: the table
// is bounded by max_runs plus the tasks in flight).
//
// No timers: time comes from the injected Clock, expiry is applied lazily
// (a sweep at most once a second, and on the way when the table is full).
//
// With a Fleet (shared_state, across replicas): a run new to this process
// is looked up once, before its first task is admitted (the fleet's
// tombstone, its parent's, and the fleet's spend of the run): the tasks
// that arrive meanwhile wait (Join::Kind::Pending, awaitFleet). A capped
// run's spend goes to the fleet's counter in batches (1% of its cap,
// kFleetFlushInterval, or when a task of the run ends), never per chunk; its spend is then the
// fleet's last known total plus what this process has not yet had acknowledged, and the cap is
// checked against it. A cancel or a spend cap reached here is stored as the fleet's tombstone and
// told to the peers (Fleet::ended).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"

namespace sluice {

class RunTable : public std::enable_shared_from_this<RunTable> {
 public:
  struct Limits {
    std::chrono::milliseconds budget{std::chrono::minutes(30)};
    std::chrono::milliseconds idle_expiry{std::chrono::minutes(10)};
    std::chrono::milliseconds tombstone{std::chrono::minutes(15)};
    size_t max_runs = 100'000;
    double max_usd = 0;  // a run's spend cap; 0 = none
  };

  /** Why a run ended (sluice_run_endings_total's `reason`). */
  enum class Ending { Cancelled, Deadline, SpendCap };
  static constexpr std::string_view toString(Ending e) {
    return e == Ending::Cancelled ? "cancelled" : e == Ending::Deadline ? "deadline" : "spend_cap";
  }

  /**
   * Tells an in-flight task to stop: why (Cancelled or SpendCap). Called on
   * any thread, outside the lock; it must hand the cancel to the task's own
   * thread.
   */
  using Canceller = std::function<void(Ending)>;
  /**
   * A task that makes its canceller only when its run ends: the table asks
   * it, under its lock, while the task is in flight (between join and
   * leave), and calls what it returns outside the lock, on that thread. It
   * is told no reason (the task reads it from the run: spendExhausted). So
   * a task that is never cancelled costs no canceller (the run filter's is
   * a cross-thread waker: an allocation).
   */
  class TaskOwner {
   public:
    virtual ~TaskOwner() = default;
    virtual std::function<void()> canceller() = 0;
  };

  /** Told once per run that ends (outside the lock). */
  using EndingListener = std::function<void(Ending)>;

  /** A capped run's unflushed spend goes to the fleet once it reaches this share of its cap, */
  static constexpr double kFleetFlushShare = 0.01;
  /** or once its last flush is this old (checked as its spend grows), or when a task of it ends. */
  static constexpr std::chrono::milliseconds kFleetFlushInterval{100};

  /**
   * The runs of the other replicas (shared_state). Any thread may call it;
   * each `done` is called exactly once, on any thread, maybe before the
   * call returns (never under the table's lock). The table answers results
   * only while it is owned by a shared_ptr (weak_from_this).
   */
  class Fleet {
   public:
    virtual ~Fleet() = default;
    /** What the fleet holds of a run new to this process. */
    struct Known {
      std::optional<Ending> ended;         // the run's tombstone
      std::optional<Ending> parent_ended;  // its parent's (when a parent was named)
      double spend_usd = 0;                // the fleet's spend counter of the run
    };
    /** One lookup of run `id` (and `parent`, may be empty); `done` with nothing known when Redis is
     * down. */
    virtual void lookup(const std::string& id, const std::string& parent,
                        std::function<void(const Known&)> done) = 0;
    /**
     * Adds `usd` to the fleet's spend counter of run `id`, which expires
     * `ttl` after its last change; `done` with the fleet's total, or
     * nullopt when it could not be added.
     */
    virtual void addSpend(const std::string& id, double usd, std::chrono::milliseconds ttl,
                          std::function<void(std::optional<double>)> done) = 0;
    /** Run `id` ended here (Cancelled or SpendCap): its tombstone for `ttl`, told to the peers. */
    virtual void ended(const std::string& id, Ending why, std::chrono::milliseconds ttl) = 0;
  };

  RunTable(const Clock& clock, Limits limits) : clock_(clock), limits_(limits) {}

  /** New limits (a reload): they apply to runs created from now on, and to expiry. */
  void setLimits(Limits limits);
  void setEndingListener(EndingListener listener);
  /**
   * Told every cancel made here (cancel(id), not one from a peer): with
   * shared_state it carries the cancel to the other replicas. Called outside
   * the lock, on the cancelling thread.
   */
  void setCancelBroadcaster(std::function<void(const std::string&)> broadcaster);
  /** Links the table with the other replicas' (replaces the cancel broadcaster). Call once, before
   * use. */
  void setFleet(std::shared_ptr<Fleet> fleet);
  /** Told the number of active runs whenever it changes (under the lock: keep it cheap). */
  void setActiveListener(std::function<void(size_t)> listener);

  /** A task's admission. */
 private:
  struct Run;

 public:
  struct Join {
    // Pending: the run is new here and the fleet is being asked about it;
    // awaitFleet(), then join again.
    enum class Kind { Joined, Cancelled, DeadlineExceeded, SpendExhausted, Pending };
    Kind kind = Kind::Joined;
    uint64_t task = 0;         // Joined: leave(task) when it is done
    MonotonicTime deadline{};  // Joined: the run's deadline
    // Joined: the task's run, held while the task is in flight (leave(join),
    // addSpend(join, usd) find it without a lookup); not for use after leave.
    Run* run = nullptr;
    // Joined: the run has no cap, no parent and no fleet: its spend is its
    // own only, added without the table's lock (addSpend(join, usd)).
    bool spend_alone = false;
  };

  /**
   * A request of run `id` starts. `parent` (may be empty): on the run's
   * first task, the run becomes a child of that run (created if unknown);
   * a child of a cancelled run is refused. `budget` (optional, the task's
   * `x-run-budget-ms`): on the first task, lowers the run's budget;
   * `max_usd` (optional, `x-run-max-usd`): on the first task, lowers the
   * run's spend cap. `canceller` is called if the run is cancelled or
   * reaches its spend cap while the task is in flight.
   */
  Join join(const std::string& id, const std::string& parent,
            std::optional<std::chrono::milliseconds> budget, Canceller canceller,
            std::optional<double> max_usd = std::nullopt);
  /** join() for a task that makes its canceller when it is needed (`owner`: until leave). */
  Join join(const std::string& id, const std::string& parent,
            std::optional<std::chrono::milliseconds> budget, TaskOwner& owner,
            std::optional<double> max_usd = std::nullopt);

  /**
   * After a Pending join: `waiter` is called (once, on any thread, outside
   * the lock) when the fleet answered about run `id`; join again then.
   * False when it already has (join again now).
   */
  bool awaitFleet(const std::string& id, std::function<void()> waiter);

  /**
   * Adds `usd` (negative: a correction, as an estimate gives way to the
   * provider's count) to the spend of run `id` and of its ancestors. A run
   * whose spend reaches its cap ends (Ending::SpendCap): the cancellers of
   * its tasks and its descendants' are called (outside the lock). Unknown
   * runs are ignored.
   */
  void addSpend(const std::string& id, double usd);
  /** addSpend() for the run of a task still in flight (`task`: its Joined admission). */
  void addSpend(const Join& task, double usd);

  /** The task is done (any end). Unknown tasks are ignored. */
  void leave(const std::string& id, uint64_t task);
  /** leave() for a task by its Joined admission (once). */
  void leave(const Join& task);

  /**
   * Cancels run `id` and its descendants: their in-flight tasks' cancellers
   * are called, later tasks are refused until the tombstones expire. An
   * unknown id is remembered as a cancelled run (a tombstone). Returns the
   * number of tasks told to stop. `from_peer`: the cancel came from another
   * replica, and is not broadcast again.
   */
  size_t cancel(const std::string& id, bool from_peer = false);
  /** A peer's run `id` reached its spend cap: ends it here as SpendCap (not told again). */
  size_t capFromPeer(const std::string& id);

  /**
   * The runs held here still running and not waiting for the fleet's
   * answer (in flight or idle), at most `max`: what a re-check against the
   * fleet's tombstones reads (a cancel published while this process could
   * not hear it).
   */
  std::vector<std::string> running(size_t max) const;
  /**
   * The fleet holds run `id`'s tombstone (`why`: Cancelled or SpendCap):
   * a run held here still running ends as a peer's cancel or cap ends it
   * (not told again); a run already ended, or not held, is left as it is.
   * Returns the number of tasks told to stop.
   */
  size_t endedInFleet(const std::string& id, Ending why);

  /** What admin GET /runs shows of a run. */
  struct Snapshot {
    std::string id;
    std::string parent;
    std::string state;  // "running", "cancelled", "deadline_exceeded", "spend_exhausted"
    size_t tasks_in_flight = 0;
    uint64_t tasks_total = 0;
    double age_seconds = 0;
    double time_left_seconds = 0;  // 0 once ended
    double spend_usd = 0;          // its tasks' and its descendant runs' so far
    double max_usd = 0;            // its cap; 0 = none
    std::vector<std::string> children;
  };
  std::vector<Snapshot> snapshot(size_t max = 1000);
  std::optional<Snapshot> snapshot(const std::string& id);

  /** Run `id` ended at its spend cap (false when it did not, or is unknown). */
  bool spendExhausted(const std::string& id) const;
  /** Runs with tasks in flight (sluice_runs_active). */
  size_t active() const;
  /** Runs held (running, idle or tombstones). */
  size_t size() const;

 private:
  enum class State { Running, Cancelled, DeadlineExceeded, SpendExhausted };
  /** A task in flight: its number and how it is told (one of the two). */
  struct Task {
    uint64_t id = 0;
    Canceller canceller;
    TaskOwner* owner = nullptr;
  };
  struct Run {
    std::string id;
    std::string parent;
    std::vector<std::string> children;
    State state = State::Running;
    MonotonicTime created{};
    MonotonicTime deadline{};
    MonotonicTime last_active{};
    MonotonicTime ended{};  // Cancelled / DeadlineExceeded / SpendExhausted: when
    uint64_t tasks_total = 0;
    // Atomic: a run whose spend touches no other run (Join::spend_alone)
    // is fed without the lock; every other change is under it.
    std::atomic<double> spend_usd{0};
    double max_usd = 0;  // 0 = no cap
    // In flight, by task number: few per run, so a vector (no node per task; its room is kept).
    std::vector<Task> tasks;
    // Its place in the idle list (nothing in flight): links between the
    // runs' own nodes (an unordered_map's elements never move), no copy of
    // the id.
    Run* idle_prev = nullptr;
    Run* idle_next = nullptr;
    bool in_lru = false;
    // With a fleet: the lookup of a run new here is out; its tasks wait.
    bool checking = false;
    std::vector<std::function<void()>> waiters;
    // With a fleet, for a capped run: spend_usd = fleet_usd + sent_usd + unflushed_usd.
    double fleet_usd = 0;      // the fleet's total, as its last answer said
    double sent_usd = 0;       // added to the fleet, not yet answered
    double unflushed_usd = 0;  // not yet sent
    MonotonicTime last_flush{};
  };
  /** A task to tell, and why (called outside the lock). */
  struct Told {
    Canceller canceller;
    std::function<void()> owners;  // a TaskOwner's canceller
    Ending ending;
    void operator()() const {
      if (canceller) {
        canceller(ending);
      } else if (owners) {
        owners();
      }
    }
  };
  struct Flush {
    std::string id;
    double usd;
  };

  Run& createLocked(const std::string& id, MonotonicTime now);
  /** Marks the run past its deadline if it is (counted once). */
  void checkDeadlineLocked(Run& run, MonotonicTime now, std::vector<Ending>& endings);
  /**
   * Ends run `id` (created as a tombstone if unknown) and its descendants
   * still running with `state`: their tasks' cancellers are collected.
   */
  void endSubtreeLocked(const std::string& id, State state, Ending ending, MonotonicTime now,
                        std::vector<Told>& cancellers, std::vector<Ending>& endings);
  void touchIdleLocked(Run& run);
  void dropFromIdleLocked(Run& run);
  void sweepLocked(MonotonicTime now, bool force);
  bool expiredLocked(const Run& run, MonotonicTime now) const;
  void eraseLocked(const std::string& id);
  Snapshot snapshotLocked(const Run& run, MonotonicTime now) const;
  void notify(const std::vector<Ending>& endings);
  bool fleetCountsLocked(const Run& run) const { return fleet_ && run.max_usd > 0; }
  /** Moves the run's unflushed spend to `flushes` (force, or past the threshold or the interval).
   */
  void collectFlushLocked(Run& run, MonotonicTime now, bool force, std::vector<Flush>& flushes);
  void sendFlushes(std::vector<Flush>& flushes);
  void onLookup(const std::string& id, const Fleet::Known& known);
  void onFlushed(const std::string& id, double usd, std::optional<double> total);
  size_t end(const std::string& id, State state, Ending ending, bool tell_fleet);
  void setActiveLocked(size_t active);
  Join joinTask(const std::string& id, const std::string& parent,
                std::optional<std::chrono::milliseconds> budget, Canceller* canceller,
                TaskOwner* owner, std::optional<double> max_usd);
  /** The run's parent, if it is held. */
  Run* parentLocked(const Run& run);
  void leaveRun(Run& run, uint64_t task, std::unique_lock<std::mutex>& lock);
  void addSpendFrom(Run& run, double usd, std::unique_lock<std::mutex>& lock);

  const Clock& clock_;
  mutable std::mutex mutex_;
  Limits limits_;
  EndingListener on_ending_;
  std::function<void(const std::string&)> broadcaster_;
  std::function<void(size_t)> on_active_;
  std::shared_ptr<Fleet> fleet_;
  std::unordered_map<std::string, Run> runs_;
  // Runs with nothing in flight, least recently active first (Run::idle_prev / idle_next).
  Run* idle_head_ = nullptr;
  Run* idle_tail_ = nullptr;
  size_t active_ = 0;  // runs with tasks in flight
  uint64_t next_task_ = 1;
  MonotonicTime last_sweep_{};
};

}  // namespace sluice
