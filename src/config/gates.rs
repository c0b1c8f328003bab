//! Feature gates: upstream v1.36.3's kubelet gates (the list its `--help` prints,
//! held against the binary by `tests/fakes/upstream_names.rs`), and litelet's stance on
//! each. litelet behaves as upstream does at a gate's default, so a gate set to its
//! default is accepted and changes nothing; set to the other value it is refused,
//! naming the gate, since litelet does not switch the behaviour. A name upstream does
//! not know is refused in upstream's words ("unrecognized feature gate").
//!
//! The exceptions are the [`SWITCHED`] gates, which litelet does switch: both values
//! are accepted, and litelet's default may differ from upstream's (each says why).

use std::collections::BTreeMap;

use super::value::ValueError;

/// A gate's maturity upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Alpha,
    Beta,
}

impl Stage {
    /// As upstream's help writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Alpha => "ALPHA",
            Stage::Beta => "BETA",
        }
    }
}

/// One upstream feature gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gate {
    pub name: &'static str,
    pub stage: Stage,
    /// Upstream's default, which is litelet's behaviour.
    pub default: bool,
}

const fn g(name: &'static str, stage: Stage, default: bool) -> Gate {
    Gate {
        name,
        stage,
        default,
    }
}

use Stage::{Alpha, Beta};

/// Upstream's kubelet gates, as its `--help` lists them (AllAlpha and AllBeta set
/// every gate of the stage).
#[rustfmt::skip]
pub const UPSTREAM: &[Gate] = &[
    g("APIResponseCompression", Beta, true),
    g("APIServerIdentity", Beta, true),
    g("APIServingWithRoutine", Alpha, false),
    g("AllAlpha", Alpha, false),
    g("AllBeta", Beta, false),
    g("AllowParsingUserUIDFromCertAuth", Beta, true),
    g("AllowUnsafeMalformedObjectDeletion", Alpha, false),
    g("AtomicFIFO", Beta, true),
    g("AuthorizePodWebsocketUpgradeCreatePermission", Beta, true),
    g("CBORServingAndStorage", Alpha, false),
    g("CPUManagerPolicyAlphaOptions", Alpha, false),
    g("CPUManagerPolicyBetaOptions", Beta, true),
    g("CRDObservedGenerationTracking", Beta, true),
    g("CRIListStreaming", Alpha, false),
    g("CSIVolumeHealth", Alpha, false),
    g("ClearingNominatedNodeNameAfterBinding", Beta, true),
    g("ClientsAllowCARotation", Beta, true),
    g("ClientsAllowCBOR", Alpha, false),
    g("ClientsAllowTLSCacheGC", Beta, true),
    g("ClientsPreferCBOR", Alpha, false),
    g("CloudControllerManagerWatchBasedRoutesReconciliation", Alpha, false),
    g("CloudControllerManagerWebhook", Alpha, false),
    g("ClusterTrustBundle", Beta, false),
    g("ClusterTrustBundleProjection", Beta, false),
    g("ComponentFlagz", Beta, true),
    g("ComponentStatusz", Beta, true),
    g("ConcurrentWatchObjectDecode", Beta, false),
    g("ConstrainedImpersonation", Beta, true),
    g("ContainerCheckpoint", Beta, true),
    g("ContainerRestartRules", Beta, true),
    g("ContainerStopSignals", Alpha, false),
    g("ContextualLogging", Beta, true),
    g("ControllerManagerReleaseLeaderElectionLockOnExit", Alpha, false),
    g("CoordinatedLeaderElection", Beta, false),
    g("CrossNamespaceVolumeDataSource", Alpha, false),
    g("DRAConsumableCapacity", Beta, true),
    g("DRADeviceBindingConditions", Beta, true),
    g("DRADeviceTaintRules", Beta, false),
    g("DRADeviceTaints", Beta, true),
    g("DRAExtendedResource", Beta, true),
    g("DRAListTypeAttributes", Alpha, false),
    g("DRANodeAllocatableResources", Alpha, false),
    g("DRAPartitionableDevices", Beta, true),
    g("DRAResourceClaimDeviceStatus", Beta, true),
    g("DRAResourceClaimGranularStatusAuthorization", Beta, true),
    g("DRAResourcePoolStatus", Alpha, false),
    g("DRASchedulerFilterTimeout", Beta, true),
    g("DRAWorkloadResourceClaims", Alpha, false),
    g("DeclarativeValidationBeta", Beta, true),
    g("DeploymentReplicaSetTerminatingReplicas", Beta, true),
    g("DetectCacheInconsistency", Beta, true),
    g("EnvFiles", Beta, true),
    g("EventedPLEG", Alpha, false),
    g("ExtendWebSocketsToKubelet", Beta, true),
    g("GangScheduling", Alpha, false),
    g("GenericWorkload", Alpha, false),
    g("GracefulNodeShutdown", Beta, true),
    g("GracefulNodeShutdownBasedOnPodPriority", Beta, true),
    g("HPAConfigurableTolerance", Beta, true),
    g("HPAScaleToZero", Alpha, false),
    g("HostnameOverride", Beta, true),
    g("ImageVolumeWithDigest", Alpha, false),
    g("InOrderInformersBatchProcess", Beta, true),
    g("InPlacePodLevelResourcesVerticalScaling", Beta, true),
    g("InPlacePodVerticalScalingExclusiveCPUs", Alpha, false),
    g("InPlacePodVerticalScalingExclusiveMemory", Alpha, false),
    g("InPlacePodVerticalScalingInitContainers", Beta, true),
    g("KubeletCrashLoopBackOffMax", Beta, true),
    g("KubeletEnsureSecretPulledImages", Beta, true),
    g("KubeletInUserNamespace", Alpha, false),
    g("KubeletSeparateDiskGC", Beta, true),
    g("KubeletServiceAccountTokenForCredentialProviders", Beta, true),
    g("ListFromCacheSnapshot", Beta, true),
    g("LocalStorageCapacityIsolationFSQuotaMonitoring", Beta, false),
    g("LoggingAlphaOptions", Alpha, false),
    g("LoggingBetaOptions", Beta, true),
    g("ManifestBasedAdmissionControlConfig", Alpha, false),
    g("MatchLabelKeysInPodTopologySpread", Beta, true),
    g("MatchLabelKeysInPodTopologySpreadSelectorMerge", Beta, true),
    g("MaxUnavailableStatefulSet", Beta, false),
    g("MemoryQoS", Alpha, false),
    g("MinimumKubeletVersion", Alpha, false),
    g("MutablePVNodeAffinity", Alpha, false),
    g("MutablePodResourcesForSuspendedJobs", Beta, true),
    g("MutableSchedulingDirectivesForSuspendedJobs", Beta, true),
    g("NativeHistograms", Alpha, false),
    g("NodeDeclaredFeatures", Beta, true),
    g("NominatedNodeNameForExpectation", Beta, true),
    g("OpenAPIEnums", Beta, true),
    g("OpportunisticBatching", Beta, true),
    g("PLEGOnDemandRelist", Beta, true),
    g("PersistentVolumeClaimUnusedSinceTime", Alpha, false),
    g("PodAndContainerStatsFromCRI", Alpha, false),
    g("PodCertificateRequest", Beta, false),
    g("PodDeletionCost", Beta, true),
    g("PodLevelResourceManagers", Alpha, false),
    g("PodLevelResources", Beta, true),
    g("PodLogsQuerySplitStreams", Alpha, false),
    g("PodReadyToStartContainersCondition", Beta, true),
    g("PodTopologyLabelsAdmission", Beta, true),
    g("PodsAPI", Alpha, false),
    g("PortForwardWebsockets", Beta, true),
    g("PreventStaticPodAPIReferences", Beta, true),
    g("QOSReserved", Alpha, false),
    g("ReduceDefaultCrashLoopBackOffDecay", Alpha, false),
    g("RelaxedServiceNameValidation", Beta, true),
    g("ReloadKubeletClientCAFile", Beta, true),
    g("ReloadKubeletServerCertificateFile", Beta, true),
    g("RemoteRequestHeaderUID", Beta, true),
    g("ResourceHealthStatus", Beta, true),
    g("ResourceHealthStatusMessage", Beta, true),
    g("RestartAllContainersOnContainerExits", Beta, true),
    g("RotateKubeletServerCertificate", Beta, true),
    g("RouteExternalCertificate", Alpha, false),
    g("RuntimeClassInImageCriApi", Alpha, false),
    g("SELinuxMount", Beta, false),
    g("SELinuxMountGAReadiness", Alpha, false),
    g("SchedulerAsyncAPICalls", Beta, false),
    g("SchedulerAsyncPreemption", Beta, true),
    g("SchedulerPopFromBackoffQ", Beta, true),
    g("ServiceAccountNodeAudienceRestriction", Beta, true),
    g("ShardedListAndWatch", Alpha, false),
    g("SizeBasedListCostEstimate", Beta, true),
    g("StaleControllerConsistencyDaemonSet", Beta, true),
    g("StaleControllerConsistencyJob", Beta, true),
    g("StaleControllerConsistencyReplicaSet", Beta, true),
    g("StaleControllerConsistencyStatefulSet", Beta, true),
    g("StatefulSetSemanticRevisionComparison", Beta, true),
    g("StorageCapacityScoring", Alpha, false),
    g("StoragePerformantSecurityPolicy", Alpha, false),
    g("StorageVersionAPI", Alpha, false),
    g("StorageVersionHash", Beta, true),
    g("StorageVersionMigrator", Beta, false),
    g("StrictIPCIDRValidation", Beta, true),
    g("StructuredAuthenticationConfigurationEgressSelector", Beta, true),
    g("StructuredAuthenticationConfigurationJWKSMetrics", Beta, true),
    g("TaintTolerationComparisonOperators", Alpha, false),
    g("TokenRequestServiceAccountUIDValidation", Beta, true),
    g("TopologyAwareWorkloadScheduling", Alpha, false),
    g("TopologyManagerPolicyAlphaOptions", Alpha, false),
    g("TopologyManagerPolicyBetaOptions", Beta, true),
    g("TranslateStreamCloseWebsocketRequests", Beta, true),
    g("UnauthenticatedHTTP2DOSMitigation", Beta, true),
    g("UnknownVersionInteroperabilityProxy", Beta, true),
    g("UnlockWhileProcessingFIFO", Beta, true),
    g("UserNamespacesHostNetworkSupport", Alpha, false),
    g("VolumeLimitScaling", Alpha, false),
    g("WatchCacheInitializationPostStartHook", Beta, true),
    g("WatchList", Beta, true),
    g("WatchListClient", Beta, true),
    g("WindowsCPUAndMemoryAffinity", Alpha, false),
    g("WindowsGracefulNodeShutdown", Beta, true),
    g("WorkloadAwarePreemption", Alpha, false),
    g("WorkloadWithJob", Alpha, false),
];

/// Gates litelet switches, with litelet's default (read once at start-up).
///
/// `EventedPLEG`: on, unlike upstream (alpha, off). The PLEG reads the runtime's
/// container events where the runtime has them and relists every 300 s as a safety
/// net; elsewhere (containerd 1.6 answers UNIMPLEMENTED) it relists every second,
/// just as with the gate off. The cluster sees the same pod statuses either way, only
/// sooner and with fewer CRI calls, so the cheaper path is the default.
/// `EventedPLEG=false` keeps the PLEG on relists only.
pub const SWITCHED: &[(&str, bool)] = &[("EventedPLEG", true)];

/// Whether the switched gate `name` is on: as given, else litelet's default (false
/// for a gate litelet does not switch).
pub fn enabled(gates: &BTreeMap<String, bool>, name: &str) -> bool {
    let default = SWITCHED.iter().find(|(n, _)| *n == name).map(|(_, on)| *on);
    match (gates.get(name), default) {
        (Some(on), Some(_)) => *on,
        (None, Some(on)) => on,
        (_, None) => false,
    }
}

/// Whether the PLEG reads the runtime's container events (`EventedPLEG`, on by
/// default in litelet: see [`SWITCHED`]).
pub fn evented_pleg(gates: &BTreeMap<String, bool>) -> bool {
    enabled(gates, "EventedPLEG")
}

/// The gate named `name`.
pub fn by_name(name: &str) -> Option<&'static Gate> {
    UPSTREAM.iter().find(|g| g.name == name)
}

/// Checks gates as given (`featureGates:` or `--feature-gates`): every name known,
/// every value the one litelet behaves as. All problems in one message.
pub fn check(gates: &BTreeMap<String, bool>) -> Result<(), ValueError> {
    let problems: Vec<String> = gates
        .iter()
        .filter_map(|(name, on)| problem(name, *on))
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ValueError::refused(problems.join("; ")))
    }
}

fn problem(name: &str, on: bool) -> Option<String> {
    match by_name(name) {
        None => Some(format!("unrecognized feature gate: {name}")),
        Some(_) if SWITCHED.iter().any(|(n, _)| *n == name) => None,
        Some(gate) if gate.default != on => Some(format!(
            "feature gate {name}={on} is not supported: litelet behaves as upstream's \
             default, {name}={} ({})",
            gate.default,
            gate.stage.as_str()
        )),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests;
