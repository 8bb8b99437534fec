//! The RPC server: one thread per process that serves the mailbox of every
//! live heap, on every device.
//!
//! ```text
//!   Heap::new ── register(mailbox, handler) ──► SERVER ─ thread (started on
//!   Heap::drop ─ Registration::drop ─────────►        first registration,
//!                                                     joined after the last)
//!   thread: sweep every port of every mailbox
//!           ├─ work found: handle it, sweep again at once
//!           └─ idle: spin SPIN sweeps, yield YIELDS times, then park for
//!                    PARK, doubling each idle park up to PARK_MAX; work or a
//!                    `wake` (every launch through a `Heap` calls it) starts
//!                    over. An idle server costs next to no core, answers
//!                    within PARK while requests come, and within PARK_MAX
//!                    after a long quiet spell.
//! ```
//!
//! The deadlock rule: a kernel may be spinning on its mailbox while the
//! handler runs, so handlers make no driver call that can wait for running
//! work (no free, no synchronize, nothing on a kernel's stream). The heap's
//! handler only maps memory (on demand) and keeps freed memory mapped.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use warpalloc_device::rpc::Pending;
use warpalloc_device::rpc::wire::{Port, Reply, Request, Status};

/// Idle sweeps spent spinning before yielding.
const SPIN: u32 = 64;
/// Idle sweeps spent yielding before parking.
const YIELDS: u32 = 64;
/// The first park of an idle server: its wake-up latency while requests
/// keep coming.
pub const PARK: Duration = Duration::from_micros(200);
/// The longest park (after PARK doubled while nothing came): the worst
/// wake-up latency after a long quiet spell. Measured: waking every 200 µs
/// forever cost a simulator benchmark 40 % of its throughput on 2 vCPUs.
pub const PARK_MAX: Duration = Duration::from_micros(200 << PARK_DOUBLINGS);
const PARK_DOUBLINGS: u32 = 4;

/// Set by `wake`: the server starts its idle sequence over (spin first).
static WOKEN: AtomicBool = AtomicBool::new(false);

/// What answers a mailbox's requests, one lane's at a time. Its second
/// argument serves the `Free`s pending on the mailbox's other ports and
/// says whether there were any: what a handler about to refuse an `Alloc`
/// calls first (`serve_frees`).
pub type Handler = dyn Fn(Request, &mut dyn FnMut() -> bool) -> Reply + Send + Sync;

/// One served mailbox.
struct Served {
    ports: *const Port,
    count: u32,
    handler: Arc<Handler>,
}

// SAFETY: `ports` points to pinned (GPU) or heap-allocated (simulator) memory
// that the registering heap keeps alive until its `Registration` is dropped,
// which removes this entry first; ports are only touched through atomics.
unsafe impl Send for Served {}
// SAFETY: as for Send.
unsafe impl Sync for Served {}

struct State {
    served: Vec<Arc<Served>>,
    thread: Option<(JoinHandle<()>, Thread, Arc<AtomicBool>)>,
    starts: u64,
}

static SERVER: Mutex<State> = Mutex::new(State {
    served: Vec::new(),
    thread: None,
    starts: 0,
});

/// Bumped whenever the served list changes, so the thread refreshes its copy.
static GENERATION: AtomicU64 = AtomicU64::new(0);

fn state() -> std::sync::MutexGuard<'static, State> {
    SERVER.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A mailbox being served; dropping it stops serving it (and the thread,
/// after the last one).
pub struct Registration {
    served: Arc<Served>,
}

/// Serves `count` ports at `ports` with `handler`, starting the server thread
/// if it is not running. Fails only if the thread cannot be spawned.
///
/// # Safety
/// `ports` points to `count` ports that stay valid until the returned
/// registration is dropped.
pub unsafe fn register(
    ports: *const Port,
    count: u32,
    handler: Arc<Handler>,
) -> std::io::Result<Registration> {
    let served = Arc::new(Served {
        ports,
        count,
        handler,
    });
    let mut st = state();
    // The thread first: a spawn that fails leaves the list as it was, so
    // no thread started later sweeps ports that the failed heap frees (the
    // entry went in first until 2026-12-07: a heap whose spawn failed left
    // its ports in the list). A new thread reads the list under the lock we
    // hold, so it sees the entry pushed below.
    if st.thread.is_none() {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("warpalloc-rpc".into())
            .spawn(move || serve(&flag))?;
        let thread = handle.thread().clone();
        st.thread = Some((handle, thread, stop));
        st.starts += 1;
    }
    st.served.push(Arc::clone(&served));
    // ORDERING: release, pairs with the acquire load in `serve` (process
    // scope): a thread that sees the new generation re-reads the list, which
    // the mutex orders anyway; the bump is only the signal.
    GENERATION.fetch_add(1, Ordering::Release);
    if let Some((_, thread, _)) = &st.thread {
        thread.unpark();
    }
    Ok(Registration { served })
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut st = state();
        st.served.retain(|s| !Arc::ptr_eq(s, &self.served));
        // ORDERING: release, pairs with the acquire load in `serve`, as in
        // `register`.
        GENERATION.fetch_add(1, Ordering::Release);
        let joined = if st.served.is_empty() {
            // Stopped under the lock: a `register` that takes the lock
            // next, and starts a thread of its own, cannot have its
            // mailbox read by this one (`serve` checks `stop` under the
            // lock before it takes a list), so no two threads poll one
            // port. Stopped after the unlock (until 2026-12-07), the old
            // thread could take the new list and sweep it beside the new
            // thread, and answer one request twice.
            let taken = st.thread.take();
            if let Some((_, _, stop)) = &taken {
                // ORDERING: release, pairs with the acquire loads in
                // `serve` (process scope); the mutex orders it before the
                // thread's next look at the list.
                stop.store(true, Ordering::Release);
            }
            taken
        } else {
            if let Some((_, thread, _)) = &st.thread {
                thread.unpark();
            }
            None
        };
        drop(st);
        if let Some((handle, thread, _)) = joined {
            thread.unpark();
            // The thread catches its handlers' panics (`answer`) and panics
            // on nothing itself; a join error would only repeat a panic
            // already printed.
            let _ = handle.join();
        }
        // The thread may hold the old list for one more sweep: wait until it
        // has dropped every reference to our entry, so our ports can go.
        while Arc::strong_count(&self.served) > 1 {
            std::thread::yield_now();
        }
    }
}

/// Wakes the server (a launch is about to start): it spins again, then
/// parks for PARK, doubling.
pub fn wake() {
    WOKEN.store(true, Ordering::Relaxed);
    if let Some((_, thread, _)) = &state().thread {
        thread.unpark();
    }
}

/// Whether the server thread is running, and how often it was started.
pub fn running() -> (bool, u64) {
    let st = state();
    (st.thread.is_some(), st.starts)
}

/// The server thread.
fn serve(stop: &AtomicBool) {
    let mut idle = 0u32;
    let mut seen = u64::MAX;
    let mut served: Vec<Arc<Served>> = Vec::new();
    // ORDERING: acquire, pairs with the release store in `Registration`'s
    // drop.
    while !stop.load(Ordering::Acquire) {
        // ORDERING: acquire, pairs with the release bumps in `register` and
        // `Registration`'s drop.
        let generation = GENERATION.load(Ordering::Acquire);
        if generation != seen {
            let st = state();
            // ORDERING: acquire, pairs with the release store in
            // `Registration`'s drop, made under this lock: a thread stopped
            // there takes no list after it (a later `register`'s mailbox
            // is its new thread's alone).
            if stop.load(Ordering::Acquire) {
                break;
            }
            served = st.served.clone();
            seen = generation;
        }
        let mut worked = false;
        for mailbox in &served {
            worked |= sweep(mailbox);
        }
        if worked || WOKEN.swap(false, Ordering::Relaxed) {
            idle = 0;
        } else {
            idle = idle.saturating_add(1);
            if idle < SPIN {
                std::hint::spin_loop();
            } else if idle < SPIN + YIELDS {
                std::thread::yield_now();
            } else {
                let doublings = (idle - SPIN - YIELDS).min(PARK_DOUBLINGS);
                std::thread::park_timeout(PARK * (1 << doublings));
            }
        }
    }
}

/// The handler's reply to `request`; a refusal (`BadRequest`) should the
/// handler panic — a bug, none known, which the panic hook prints. The
/// server thread lives on: the lane waiting for this answer gets one (a
/// null), and every kernel on every mailbox keeps its server, instead of
/// spinning on its port for ever.
fn answer(handler: &Handler, request: Request, frees: &mut dyn FnMut() -> bool) -> Reply {
    catch_unwind(AssertUnwindSafe(|| handler(request, frees)))
        .unwrap_or(Reply::Refused(Status::BadRequest))
}

/// Answers every pending request of one mailbox; whether there was one.
fn sweep(mailbox: &Served) -> bool {
    let mut worked = false;
    for i in 0..mailbox.count as usize {
        // SAFETY: `i < count`, the registration's contract.
        let port = unsafe { &*mailbox.ports.add(i) };
        let Some(request) = warpalloc_device::rpc::poll(port) else {
            continue;
        };
        worked = true;
        answer_port(mailbox, request, &mut || serve_frees(mailbox, i));
    }
    worked
}

/// Answers each lane of a port's pending `request` with the mailbox's
/// handler (`frees` its second argument), and hands the port back.
fn answer_port(mailbox: &Served, request: Pending<'_>, frees: &mut dyn FnMut() -> bool) {
    let mut lanes = request.lane_mask();
    while lanes != 0 {
        let lane = lanes.trailing_zeros();
        lanes &= lanes - 1;
        let reply = match request.request(lane) {
            Ok(r) => answer(&*mailbox.handler, r, frees),
            Err(status) => Reply::Refused(status),
        };
        request.reply(lane, &reply);
    }
    request.finish();
}

/// Answers the `Free`s pending on `mailbox`'s ports but port `but`;
/// whether there were any. A handler about to refuse an `Alloc` calls it
/// (through its second argument) and asks the region again: a warp that
/// freed a large block (a request it does not wait for) and then told the
/// other warps that memory came back (`DeviceHeap::memory_returned`, a
/// release that their acquire pairs with before they send) has its free
/// visible here — but on a port this sweep may reach after the `Alloc`
/// it let through, which was refused for want of that memory, and the
/// heap then stayed out of memory until a trim (a review, 2026-12-07).
/// A load a port, only on a refusal.
fn serve_frees(mailbox: &Served, but: usize) -> bool {
    let mut served = false;
    for j in (0..mailbox.count as usize).filter(|&j| j != but) {
        // SAFETY: `j < count`, the registration's contract.
        let port = unsafe { &*mailbox.ports.add(j) };
        let Some(request) = warpalloc_device::rpc::poll(port) else {
            continue;
        };
        // A port's request is of one opcode: a `Free`'s, or left for the
        // sweep.
        if !matches!(
            request.request(request.lane_mask().trailing_zeros()),
            Ok(Request::Free { .. })
        ) {
            continue;
        }
        answer_port(mailbox, request, &mut || false);
        served = true;
    }
    served
}

impl Registration {
    /// Waits until the server has taken every request sent on the
    /// registered ports (a kernel's `Free`s do not wait for their answers,
    /// so some may still be in flight when the kernel ends), waking the
    /// server meanwhile; an error after `timeout`.
    pub fn wait_idle(&self, timeout: Duration) -> Result<(), Duration> {
        let start = std::time::Instant::now();
        for i in 0..self.served.count as usize {
            // SAFETY: `i < count` ports, alive while we are registered.
            let port = unsafe { &*self.served.ports.add(i) };
            while !warpalloc_device::rpc::idle(port) {
                if start.elapsed() > timeout {
                    return Err(timeout);
                }
                wake();
                std::thread::yield_now();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handler that panics is answered for: a refusal, and the server's
    /// next answer is the handler's again.
    #[test]
    fn a_handler_that_panics_is_answered_with_a_refusal() {
        let handler: Arc<Handler> = Arc::new(|request, _| match request {
            Request::Alloc { .. } => panic!("a handler's bug, planted"),
            _ => Reply::Free(Ok(())),
        });
        let alloc = Request::Alloc {
            bytes: 2 << 20,
            align: 2 << 20,
        };
        let none = &mut || false;
        assert_eq!(
            answer(&*handler, alloc, none),
            Reply::Refused(Status::BadRequest)
        );
        let free = Request::Free {
            addr: 2 << 20,
            bytes: 2 << 20,
        };
        assert_eq!(answer(&*handler, free, none), Reply::Free(Ok(())));
    }

    /// Sends `request` on `port` for lane 0, as a client's one-lane path
    /// does (the arguments, the header, then the flag).
    fn send(port: &Port, request: &Request) {
        request.write(port.buffer(0));
        port.lane_mask.store(1, Ordering::Relaxed);
        port.opcode
            .store(request.opcode() as u32, Ordering::Relaxed);
        port.client
            .store(port.client.load(Ordering::Relaxed) ^ 1, Ordering::Release);
    }

    /// A mailbox whose port 0 holds an `Alloc` and port 1 a `Free` of the
    /// only memory the host has: the sweep reaches the `Alloc` first, and
    /// its handler, about to refuse, serves the free first (as a kernel
    /// whose free came before its request, on a later port, needs), so
    /// the `Alloc` gets the memory. With the handler's call of its second
    /// argument dropped, it is refused.
    #[test]
    fn an_alloc_about_to_be_refused_is_served_after_the_frees_pending() {
        for serve_first in [true, false] {
            let ports = [Port::new(), Port::new()];
            let free = Arc::new(std::sync::atomic::AtomicU32::new(0));
            let handler: Arc<Handler> = {
                let free = Arc::clone(&free);
                Arc::new(move |request, frees| match request {
                    Request::Free { .. } => {
                        free.fetch_add(1, Ordering::Relaxed);
                        Reply::Free(Ok(()))
                    }
                    Request::Alloc { .. } => {
                        if free.load(Ordering::Relaxed) == 0 && serve_first {
                            frees();
                        }
                        match free.load(Ordering::Relaxed) {
                            0 => Reply::Alloc(Err(Status::Limit)),
                            _ => {
                                free.fetch_sub(1, Ordering::Relaxed);
                                Reply::Alloc(Ok(2 << 20))
                            }
                        }
                    }
                    Request::Ping { words } => Reply::Ping(words),
                })
            };
            let served = Served {
                ports: ports.as_ptr(),
                count: 2,
                handler,
            };
            send(
                &ports[0],
                &Request::Alloc {
                    bytes: 2 << 20,
                    align: 2 << 20,
                },
            );
            send(
                &ports[1],
                &Request::Free {
                    addr: 2 << 20,
                    bytes: 2 << 20,
                },
            );
            assert!(sweep(&served));
            for port in &ports {
                assert!(warpalloc_device::rpc::idle(port), "a request left");
            }
            let got = warpalloc_device::rpc::wire::Reply::read_alloc(ports[0].buffer(0));
            let want = if serve_first {
                Ok(2 << 20)
            } else {
                Err(Status::Limit)
            };
            assert_eq!(got, want, "frees served first: {serve_first}");
            assert_eq!(free.load(Ordering::Relaxed), u32::from(!serve_first));
        }
    }
}
