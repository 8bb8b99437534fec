//! What a lane runs on: a stackful coroutine, or (for Miri) an OS thread that
//! passes a baton to and from the scheduler. Both carry the same protocol:
//! the scheduler resumes a lane with a reply word, and the lane runs until it
//! suspends with a [`Request`] or returns.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};

use crate::lane::{self, Current, LaneCtx, Link, Request};

/// How a lane's kernel run ended: `Err` holds a panic message.
pub(crate) type LaneOutcome = Result<(), String>;

/// The kernel as every lane sees it.
///
/// The lifetime is erased to `'static` by the launch, which guarantees that
/// every fiber is dropped (coroutine reset, thread joined) before it returns.
pub(crate) type KernelRef = &'static (dyn Fn() + Sync);

/// What a resumed lane hands back.
pub(crate) enum Resumed {
    /// The lane suspended at a switch point with this request.
    Request(Request),
    /// The lane returned from the kernel (or panicked).
    Done(LaneOutcome),
}

/// One lane's execution context.
pub(crate) enum Fiber {
    Coroutine(CoroutineFiber),
    Thread(ThreadFiber),
}

impl Fiber {
    /// Resumes the lane with `reply` (the result of its last request).
    pub(crate) fn resume(&mut self, reply: u64) -> Resumed {
        match self {
            Fiber::Coroutine(c) => c.resume(reply),
            Fiber::Thread(t) => t.resume(reply),
        }
    }
}

/// Payload of the unwind that tears down a thread lane of an aborted launch.
struct AbortLane;

fn run_kernel(kernel: KernelRef) -> LaneOutcome {
    match catch_unwind(AssertUnwindSafe(kernel)) {
        Ok(()) => Ok(()),
        Err(payload) if payload.is::<AbortLane>() => resume_unwind(payload),
        Err(payload) => {
            // The kernel is over: the message is the simulator's work, not
            // the lane's, so it runs with no lane installed (a program whose
            // global allocator serves lanes from a heap, `WarpAlloc`, sends
            // it to the system allocator).
            let lane = lane::set_current(None);
            let message = panic_message(payload.as_ref());
            drop(payload);
            lane::set_current(lane);
            Err(message)
        }
    }
}

/// The text of a panic's payload (`panic!`'s `&str` or `String`), or a
/// line saying it had none.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

// ---------------------------------------------------------------------------
// Coroutines
// ---------------------------------------------------------------------------

type LaneCoroutine = Coroutine<u64, Request, LaneOutcome, DefaultStack>;

pub(crate) struct CoroutineFiber {
    coroutine: LaneCoroutine,
    ctx: Arc<LaneCtx>,
    /// The coroutine's yielder, announced by its first suspension.
    yielder: *const Yielder<u64, Request>,
    done: bool,
}

impl CoroutineFiber {
    pub(crate) fn new(
        ctx: Arc<LaneCtx>,
        kernel: KernelRef,
        stack_size: usize,
    ) -> std::io::Result<Self> {
        let stack = DefaultStack::new(stack_size)?;
        let coroutine = Coroutine::with_stack(stack, move |yielder: &Yielder<u64, Request>, _| {
            // Announce the yielder so the scheduler can bind it to this lane in
            // the thread-local state before every later resume.
            yielder.suspend(Request::Hello(yielder as *const _ as usize));
            run_kernel(kernel)
        });
        let mut fiber = CoroutineFiber {
            coroutine,
            ctx,
            yielder: std::ptr::null(),
            done: false,
        };
        match fiber.coroutine.resume(0) {
            CoroutineResult::Yield(Request::Hello(y)) => {
                fiber.yielder = y as *const Yielder<u64, Request>;
            }
            // The body suspends with `Hello` before anything else.
            _ => unreachable!("a lane coroutine starts by announcing its yielder"),
        }
        Ok(fiber)
    }

    fn resume(&mut self, reply: u64) -> Resumed {
        let previous = lane::set_current(Some(Current {
            ctx: Arc::as_ptr(&self.ctx),
            link: Link::Coroutine(self.yielder.cast()),
        }));
        let result = self.coroutine.resume(reply);
        lane::set_current(previous);
        match result {
            CoroutineResult::Yield(request) => Resumed::Request(request),
            CoroutineResult::Return(outcome) => {
                self.done = true;
                Resumed::Done(outcome)
            }
        }
    }
}

impl Drop for CoroutineFiber {
    fn drop(&mut self) {
        if !self.done && self.coroutine.started() && !self.coroutine.done() {
            // SAFETY: the lane is suspended inside a kernel of a launch that
            // failed. Resetting discards its stack without running destructors,
            // as a trapped GPU kernel runs none; kernels must not rely on
            // destructors for soundness (no scoped threads or pinned borrows
            // across switch points), which the simulator's docs require. Nothing
            // on that stack is referenced from outside it.
            unsafe { self.coroutine.force_reset() };
        }
    }
}

// ---------------------------------------------------------------------------
// OS threads with a baton
// ---------------------------------------------------------------------------

enum Turn {
    /// The lane runs, with the scheduler's reply.
    Lane(u64),
    /// The scheduler runs, with what the lane handed back.
    Scheduler(Option<Resumed>),
    /// The launch failed: the lane unwinds and its thread ends.
    Abort,
}

pub(crate) struct Baton {
    turn: Mutex<Turn>,
    changed: Condvar,
}

impl Baton {
    fn lock(&self) -> MutexGuard<'_, Turn> {
        // A poisoned baton only means a lane panicked while holding it, which
        // the lane's own catch_unwind reports; the state is still valid.
        self.turn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, Turn>) -> MutexGuard<'a, Turn> {
        self.changed
            .wait(guard)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Lane side: hand `resumed` to the scheduler and wait for the next turn.
    /// Returns the reply, or unwinds the lane when the launch is aborted.
    pub(crate) fn suspend(&self, request: Request) -> u64 {
        let mut turn = self.lock();
        // An abort stays: a lane that unwinds from it and reaches another
        // switch point (a destructor's collective) must see it again, not
        // overwrite it and wait for a turn that never comes (the launch
        // hung in its join; a review, 2026-12-07).
        if !matches!(*turn, Turn::Abort) {
            *turn = Turn::Scheduler(Some(Resumed::Request(request)));
            self.changed.notify_all();
        }
        loop {
            match &*turn {
                Turn::Lane(reply) => return *reply,
                Turn::Abort => {
                    drop(turn);
                    if std::thread::panicking() {
                        // Already unwinding (a destructor reached a switch
                        // point): return a dummy and let the unwind go on.
                        return 0;
                    }
                    resume_unwind(Box::new(AbortLane));
                }
                Turn::Scheduler(_) => turn = self.wait(turn),
            }
        }
    }

    /// Lane side: wait for the first turn. `false` when aborted before start.
    fn wait_first_turn(&self) -> bool {
        let mut turn = self.lock();
        loop {
            match &*turn {
                Turn::Lane(_) => return true,
                Turn::Abort => return false,
                Turn::Scheduler(_) => turn = self.wait(turn),
            }
        }
    }

    fn finish(&self, outcome: LaneOutcome) {
        let mut turn = self.lock();
        if !matches!(*turn, Turn::Abort) {
            *turn = Turn::Scheduler(Some(Resumed::Done(outcome)));
        }
        self.changed.notify_all();
    }
}

pub(crate) struct ThreadFiber {
    baton: Arc<Baton>,
    handle: Option<JoinHandle<()>>,
    done: bool,
}

impl ThreadFiber {
    pub(crate) fn new(
        ctx: Arc<LaneCtx>,
        kernel: KernelRef,
        stack_size: usize,
    ) -> std::io::Result<Self> {
        let baton = Arc::new(Baton {
            turn: Mutex::new(Turn::Scheduler(None)),
            changed: Condvar::new(),
        });
        let lane_baton = Arc::clone(&baton);
        let handle = std::thread::Builder::new()
            .name("warpalloc-sim-lane".into())
            .stack_size(stack_size.max(64 * 1024))
            .spawn(move || {
                lane::set_current(Some(Current {
                    ctx: Arc::as_ptr(&ctx),
                    link: Link::Thread(Arc::as_ptr(&lane_baton)),
                }));
                if !lane_baton.wait_first_turn() {
                    return;
                }
                let outcome = catch_unwind(AssertUnwindSafe(|| run_kernel(kernel)));
                lane::set_current(None);
                // An `Err` is the unwind of an abort: nobody waits for a result.
                if let Ok(outcome) = outcome {
                    lane_baton.finish(outcome);
                }
                drop(ctx);
            })?;
        Ok(ThreadFiber {
            baton,
            handle: Some(handle),
            done: false,
        })
    }

    fn resume(&mut self, reply: u64) -> Resumed {
        let baton = &self.baton;
        let mut turn = baton.lock();
        *turn = Turn::Lane(reply);
        baton.changed.notify_all();
        loop {
            if let Turn::Scheduler(slot) = &mut *turn
                && let Some(resumed) = slot.take()
            {
                if matches!(resumed, Resumed::Done(_)) {
                    self.done = true;
                }
                return resumed;
            }
            turn = baton.wait(turn);
        }
    }
}

impl Drop for ThreadFiber {
    fn drop(&mut self) {
        if !self.done {
            *self.baton.lock() = Turn::Abort;
            self.baton.changed.notify_all();
        }
        if let Some(handle) = self.handle.take() {
            // The lane thread catches its own panics; a join error cannot carry
            // anything the launch has not already reported.
            let _ = handle.join();
        }
    }
}
