//! Why a launch failed, with the seed that replays it.

use std::fmt;
use std::panic::Location;

/// A failed launch. Its message starts with the seed and how to replay it.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "simulator launch failed (seed {seed:#x}; {replay}): {kind}",
    replay = replay_hint(*.deterministic, *.seed)
)]
pub struct SimError {
    /// The seed of the failed launch.
    pub seed: u64,
    /// Whether the launch was deterministic (one worker), so that the seed
    /// replays it exactly.
    pub deterministic: bool,
    /// What went wrong.
    pub kind: SimErrorKind,
}

fn replay_hint(deterministic: bool, seed: u64) -> String {
    if deterministic {
        format!("replay with WARPALLOC_SIM_SEED={seed:#x}")
    } else {
        "parallel run: rerun with one worker to replay a schedule".to_string()
    }
}

/// What went wrong in a launch.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SimErrorKind {
    /// A lane panicked (an assertion in the kernel, for instance).
    #[error("{lane} panicked: {message}")]
    LanePanicked {
        /// The lane.
        lane: LaneReport,
        /// The panic message.
        message: String,
    },
    /// A warp collective was used in a way that is undefined on the GPU.
    #[error("{lane}: {problem}")]
    CollectiveMisuse {
        /// The lane whose collective is wrong.
        lane: LaneReport,
        /// What is wrong, naming the other lanes and their locations.
        problem: String,
    },
    /// No lane of a warp can make progress while collectives wait.
    #[error("deadlock in warp {warp} of block {block:?}; lanes:\n{}", list(.lanes))]
    Deadlock {
        /// Block index of the warp.
        block: (u32, u32, u32),
        /// Warp index within the block.
        warp: u32,
        /// Every lane of the warp.
        lanes: Vec<LaneReport>,
    },
    /// The launch ran past its watchdog.
    #[error("watchdog: {limit}; where the lanes wait:\n{}", summarize(.lanes))]
    Watchdog {
        /// Which limit was hit.
        limit: String,
        /// Every lane still alive.
        lanes: Vec<LaneReport>,
    },
    /// The launch shape is invalid (zero-sized, or too large to index).
    #[error("invalid launch: {0}")]
    InvalidLaunch(String),
    /// A worker or lane OS thread could not be started.
    #[error("could not start a thread: {0}")]
    Spawn(String),
}

/// Where one lane is.
#[derive(Debug, Clone)]
pub struct LaneReport {
    /// Block index.
    pub block: (u32, u32, u32),
    /// Thread index within the block.
    pub thread: (u32, u32, u32),
    /// Warp index within the block.
    pub warp: u32,
    /// Lane index within the warp.
    pub lane: u32,
    /// What it is doing.
    pub state: LaneState,
    /// The source location of its last switch point, if it reached one.
    pub site: Option<&'static Location<'static>>,
}

/// What a lane is doing when reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaneState {
    /// Not started yet.
    NotStarted,
    /// Can run (after an atomic, a sleep, or a completed collective).
    Runnable,
    /// Parked in `activemask()`.
    Activemask,
    /// Waiting in a sync collective.
    Collective {
        /// `ballot`, `match_any`, `shfl` or `syncwarp`.
        kind: &'static str,
        /// The mask it waits for.
        lane_mask: u32,
    },
    /// Returned from the kernel.
    Exited,
}

impl fmt::Display for LaneState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaneState::NotStarted => write!(f, "not started"),
            LaneState::Runnable => write!(f, "runnable"),
            LaneState::Activemask => write!(f, "parked in activemask"),
            LaneState::Collective { kind, lane_mask } => {
                write!(f, "waiting in {kind}(lane_mask={lane_mask:#010x})")
            }
            LaneState::Exited => write!(f, "exited"),
        }
    }
}

impl fmt::Display for LaneReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "block {:?} thread {:?} (warp {}, lane {}) {}",
            self.block, self.thread, self.warp, self.lane, self.state
        )?;
        if let Some(site) = self.site {
            write!(f, " at {site}")?;
        }
        Ok(())
    }
}

fn list(lanes: &[LaneReport]) -> String {
    lanes
        .iter()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Many lanes wait at few places: group by (state, site) and count.
fn summarize(lanes: &[LaneReport]) -> String {
    let mut groups: Vec<(String, Vec<&LaneReport>)> = Vec::new();
    for lane in lanes {
        let key = match lane.site {
            Some(site) => format!("{} at {site}", lane.state),
            None => lane.state.to_string(),
        };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(lane),
            None => groups.push((key, vec![lane])),
        }
    }
    groups
        .iter()
        .map(|(key, members)| {
            let first = members[0];
            format!(
                "  {} lane(s) {key} (first: block {:?} thread {:?})",
                members.len(),
                first.block,
                first.thread
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
