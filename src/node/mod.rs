//! The node: registration of the Node object, its status, and the heartbeat lease.
//!
//! Threads (started by [`start`]):
//! - `node` (`updater.rs`): registers the Node, then every 10 s computes its status
//!   and PATCHes `nodes/<name>/status` when it changed or every 5 minutes.
//! - `lease` (`lease.rs`): renews `kube-node-lease/<name>` every 10 s.
//! - `node-watch` (`lister.rs`): keeps the [`NodeLister`] current: the Node's labels
//!   and taints for admission, and the base of `node`'s next status computation.
//! - `node-stop`: on shutdown, closes both threads' API connections so a request in
//!   flight ends at once.
//!
//! Channels: `node` → `lease`: the registered Node's name and UID (`NodeRef`);
//! `lease` → `node`: "read the Node again" (`resync`) after an outage or a lost lease;
//! both select on the shutdown receiver (disconnected on SIGTERM/SIGINT).
//!
//! Decisions are pure and live apart from the threads: `config.rs` (flag parsing),
//! `addresses.rs` (`--cloud-provider`, `--node-ip`, the published addresses),
//! `machine.rs` (file parsers over injectable roots), `status.rs` (capacity,
//! allocatable, conditions, change detection, the PATCH body), `register.rs` (the Node
//! to create and the label reconcile), `lease.rs::desired_lease`. The rest of litelet
//! feeds the status through `NodeInputs` (`inputs.rs`; `from_host` reads the shared
//! `runtime::state::RuntimeState`).
//!
//! At idle, with default periods, the threads send 6 lease patches a minute plus one
//! status patch every 5 minutes: 6.2 requests a minute. Neither answer is read: the
//! lease comes back as protobuf, the Node as its protobuf metadata alone (about 1 KB
//! where the JSON Node is 5 to 20); the Node itself comes back once per change on the
//! watch, as upstream's node informer has it.

pub mod addresses;
pub mod config;
pub mod inputs;
pub mod lease;
pub mod lister;
pub mod machine;
pub mod register;
pub mod status;
mod updater;

use std::thread::JoinHandle;

use crossbeam_channel::{select_biased, Receiver};

use crate::api::ApiClient;
use crate::events::Recorder;

pub use addresses::{CloudProvider, NodeIps};
pub use config::{ConfigError, NodeConfig, Threshold};
pub use inputs::NodeInputs;
pub use lease::NodeRef;
pub use lister::NodeLister;
pub use machine::{MachineError, MachineInfo, MachineReader, MachineRoots};
pub use status::{Health, KUBELET_VERSION, KUBERNETES_VERSION};

/// The running node threads, and the Node as the watch last delivered it.
pub struct NodeHandles {
    pub node: JoinHandle<()>,
    pub lease: JoinHandle<()>,
    pub watch: JoinHandle<()>,
    pub lister: NodeLister,
}

impl NodeHandles {
    /// Waits for the threads (they end soon after shutdown).
    pub fn join(self) {
        let _ = self.node.join();
        let _ = self.lease.join();
        let _ = self.watch.join();
    }
}

/// Starts the `node`, `lease` and `node-watch` threads (and their stop helpers)
/// against the API server. They run until `shutdown` fires (a message or disconnection).
pub fn start(
    client: &ApiClient,
    config: NodeConfig,
    inputs: NodeInputs,
    recorder: Recorder,
    shutdown: Receiver<()>,
) -> std::io::Result<NodeHandles> {
    let node_client = client.with_own_connections();
    // One pool for both: the lease's renewal every 10 s keeps its connection open
    // for the node status, which would otherwise pay a new TLS handshake each time.
    let lease_client = node_client.clone();
    let (refs_tx, refs_rx) = crossbeam_channel::unbounded();
    let (resync_tx, resync_rx) = crossbeam_channel::bounded(1);
    // Disconnected once both threads have ended (each holds a sender): only then is
    // nobody left whose connections the stopper must close.
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(0);
    let lease_done = done_tx.clone();

    let stop = (node_client.clone(), lease_client.clone(), shutdown.clone());
    crate::process::spawn_essential("node-stop", 128 * 1024, move || {
        let (a, b, shutdown) = stop;
        // Biased: when shutdown and "done" are both ready, closing must win.
        select_biased! {
            recv(shutdown) -> _ => {
                a.close_connections();
                b.close_connections();
            }
            recv(done_rx) -> _ => {}
        }
    })?;

    let keeper = lease::LeaseKeeper {
        client: lease_client,
        config: config.clone(),
        node_refs: refs_rx,
        resync: resync_tx,
        shutdown: shutdown.clone(),
    };
    let lease = crate::process::spawn_essential("lease", 256 * 1024, move || {
        let _done = lease_done;
        keeper.run();
    })?;

    let lister = NodeLister::new();
    let watch = lister::spawn(client, &config.node_name, lister.clone(), shutdown.clone())?;
    let updater = updater::Updater {
        client: node_client,
        config,
        inputs,
        watched: lister.clone(),
        recorder,
        node_refs: refs_tx,
        resync: resync_rx,
        shutdown,
    };
    let node = crate::process::spawn_essential("node", 512 * 1024, move || {
        // Dropped when this thread ends, which releases the stopper.
        let _done = done_tx;
        updater.run();
    })?;
    Ok(NodeHandles {
        node,
        lease,
        watch,
        lister,
    })
}
