//! Labelling (paper 000, Section III-C, done exhaustively): for each matrix,
//! scheme and bin, time every kernel on that bin alone on the device; the best
//! kernel per bin gives each scheme's plan, which is then timed as a whole (bins
//! interact); the best whole plan is the oracle. Every timing goes to the results
//! database the moment it is measured, and what the database already holds is
//! never timed again, so a killed trainer loses at most the measurement in flight.

use anyhow::{Context, Result};
use engine::{AnyMatrix, Engine, LaunchKey, LaunchMode};
use rand::{Rng, SeedableRng};
use sparse::{Binning, Csr, Features, KernelId, Plan, Scheme};
use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::time::Instant;
use store::{
    ContextId, DeviceId, FeatureVector, MatrixId, MatrixRecord, MeasurementContext, MeasurementKey,
    NewMeasurement, PlanRecord, Precision, RunId, Store, Target,
};

/// How kernels are timed while labelling: the engine's timing policy (the one
/// `spmv bench` and the service use) plus what only labelling needs.
#[derive(Debug, Clone)]
pub struct LabelOptions {
    /// Warm-up, repetitions, CI target and budgets of one measurement.
    pub policy: engine::TimingPolicy,
    /// The adaptive batches of a matrix may take at most this share of the time
    /// its first batches took (plus one `ci_budget_ms`): 0.5 bounds the
    /// labelling time of a matrix at about 1.5 times that of fixed repetitions.
    pub ci_extra_share: f64,
    /// A kernel whose first run on a bin is this many times slower than the best
    /// kernel measured so far on that bin is recorded from that one run (it cannot
    /// be the label: the machines' noise is far below this factor). 0 disables it.
    pub hopeless_factor: f64,
    /// A run still `running` without a heartbeat for this long is marked
    /// interrupted when labelling starts (see [`crate::runs`]).
    pub stale_after: std::time::Duration,
}

impl Default for LabelOptions {
    fn default() -> Self {
        LabelOptions {
            policy: engine::TimingPolicy::default(),
            ci_extra_share: 0.5,
            hopeless_factor: 8.0,
            stale_after: crate::runs::DEFAULT_STALE_AFTER,
        }
    }
}

/// The best plan of one scheme.
#[derive(Debug, Clone)]
pub struct SchemePlan {
    /// Best kernel per bin.
    pub plan: Plan,
    /// The plan timed as a whole (ms).
    pub total_ms: f64,
    /// Sum of its bins timed alone (ms).
    pub bins_sum_ms: f64,
    /// Relative half-width of the 95% CI of `total_ms` (0 when unknown).
    pub ci_rel: f64,
}

/// Everything labelling learned about one matrix.
#[derive(Debug, Clone)]
pub struct MatrixLabels {
    /// The matrix's row in the database.
    pub matrix: MatrixId,
    /// Its name.
    pub name: String,
    /// Its features.
    pub features: Features,
    /// Per (scheme, bin): each kernel's time on that bin alone (ms).
    pub bins: BTreeMap<(Scheme, usize), Vec<(KernelId, f64)>>,
    /// Per (scheme, bin): the relative 95% CI half-width of each time in `bins`
    /// (same order; 0 when unknown: legacy rows, a single hopeless run).
    pub bin_ci: BTreeMap<(Scheme, usize), Vec<(KernelId, f64)>>,
    /// Per scheme, its best plan.
    pub plans: BTreeMap<Scheme, SchemePlan>,
}

impl SchemePlan {
    /// A plan with its time as a whole and the sum of its bins' times.
    fn timed(plan: Plan, total: Timed, bins_sum_ms: f64) -> SchemePlan {
        SchemePlan {
            plan,
            total_ms: total.median_ms,
            bins_sum_ms,
            ci_rel: total.ci_rel.unwrap_or(0.0),
        }
    }
}

impl MatrixLabels {
    /// No labels yet.
    fn new(matrix: MatrixId, name: &str, features: Features) -> MatrixLabels {
        MatrixLabels {
            matrix,
            name: name.to_string(),
            features,
            bins: BTreeMap::new(),
            bin_ci: BTreeMap::new(),
            plans: BTreeMap::new(),
        }
    }

    /// The oracle: the scheme whose best plan is fastest as a whole.
    pub fn oracle(&self) -> Option<(Scheme, &SchemePlan)> {
        self.plans
            .iter()
            .min_by(|a, b| a.1.total_ms.total_cmp(&b.1.total_ms))
            .map(|(s, p)| (*s, p))
    }

    /// Time (ms) of one kernel on the whole matrix (single-bin scheme), if measured.
    pub fn single_kernel_ms(&self, k: KernelId) -> Option<f64> {
        self.bins
            .get(&(Scheme::Single, 0))
            .and_then(|v| v.iter().find(|(kk, _)| *kk == k).map(|(_, t)| *t))
    }
}

/// What the labeller needs from its surroundings.
pub struct Labeller<'a> {
    /// The device.
    pub engine: &'a Engine,
    /// The results database.
    pub store: &'a Store,
    /// The device's row.
    pub device: DeviceId,
    /// The training run measurements are attributed to.
    pub run: Option<RunId>,
    /// Timing options.
    pub opts: LabelOptions,
    /// The run's heartbeat, written as measurements are stored.
    pub heartbeat: crate::runs::Heartbeat,
}

/// The x every labelling run multiplies by: seeded, values in [-1, 1] (the
/// engine rounds them to the matrix's precision).
pub fn test_vector(n: usize) -> Vec<f64> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x5eed);
    (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect()
}

/// `a` with its values rounded to `precision` (and back to `f64`): the matrix
/// as the device computes with it, whose content hash the database keys it by.
pub fn in_precision(a: &Csr<f64>, precision: Precision) -> Cow<'_, Csr<f64>> {
    match precision {
        Precision::F32 => Cow::Owned(a.cast::<f32>().cast::<f64>()),
        Precision::F64 => Cow::Borrowed(a),
    }
}

/// Kernels in the order they are timed: the usually-fast ones first, so that the
/// hopeless-kernel cut has a good reference early.
pub fn kernel_order() -> Vec<KernelId> {
    let mut v = vec![
        KernelId::CsrAdaptive,
        KernelId::Serial,
        KernelId::Subvector(2),
        KernelId::Subvector(4),
        KernelId::Subvector(8),
        KernelId::MergePath,
        KernelId::MergeTile,
        KernelId::Subvector(16),
        KernelId::Subvector(32),
        KernelId::Subvector(64),
        KernelId::Subvector(128),
        KernelId::Vector,
    ];
    v.retain(|k| engine::registry().iter().any(|i| i.id == *k && i.per_bin));
    v
}

/// A bin's rows as a key: the BLAKE3 hash of its row ranges and its row count.
type RowsSignature = ([u8; 32], usize);

/// A BLAKE3 hash of the row ranges of a bin, and its row count: bins of different
/// schemes with the same rows run the same launches, so their timings are shared
/// instead of measured twice. 256 bits, so two different row sets never share a key.
fn rows_signature(b: &Binning, bin: usize) -> RowsSignature {
    let mut h = blake3::Hasher::new();
    let mut n = 0usize;
    for &f in &b.bins[bin] {
        let end = (f as usize + b.u).min(b.nrows);
        h.update(&u64::from(f).to_le_bytes());
        h.update(&(end as u64).to_le_bytes());
        n += end - f as usize;
    }
    (*h.finalize().as_bytes(), n)
}

/// Whole-plan timings by the launches the plan runs ([`engine::launch_key`]):
/// the best plans of several schemes are often the same launches (every bin
/// chose one kernel: that kernel over all rows, as the single-bin scheme's
/// plan), and timing each again only gave the oracle a choice among equal
/// launches decided by noise. The first scheme's timing (in the order of
/// [`Scheme::all`]) is every later one's, in labelling and when labels are
/// rebuilt from the store alike (older databases hold a timing per scheme;
/// the later ones are then not read).
#[derive(Default)]
struct SharedLaunches(HashMap<LaunchKey, Timed>);

impl SharedLaunches {
    fn get(&self, k: &LaunchKey) -> Option<Timed> {
        self.0.get(k).copied()
    }

    fn keep(&mut self, k: LaunchKey, t: Timed) {
        self.0.entry(k).or_insert(t);
    }
}

/// One timing as labelling keeps it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timed {
    /// Median kernel time (ms).
    pub median_ms: f64,
    /// Interquartile range (ms).
    pub spread_ms: f64,
    /// Timed repetitions.
    pub reps: u32,
    /// Relative half-width of the median's 95% CI, when finite.
    pub ci_rel: Option<f64>,
}

impl Timed {
    /// From the engine's statistics.
    pub fn of(st: &engine::TimeStats) -> Timed {
        Timed {
            median_ms: st.median_ms,
            spread_ms: st.spread * st.median_ms,
            reps: st.reps as u32,
            ci_rel: st.ci_rel.is_finite().then_some(st.ci_rel),
        }
    }

    /// From a stored measurement.
    fn stored(m: &NewMeasurement) -> Timed {
        Timed {
            median_ms: m.median_ms,
            spread_ms: m.spread_ms,
            reps: m.repetitions,
            ci_rel: m.ci_rel,
        }
    }
}

/// Kernels whose first run is more than this fraction slower than the best so
/// far on a bin are no contenders: their first batch is kept without adaptive
/// repetitions (a 2% CI cannot bring them within noise of the best).
const CONTENDER_MARGIN: f64 = 0.25;

/// The time a matrix may spend on adaptive batches: `share` of the time its
/// first batches took, plus one measurement's budget.
struct ExtraBudget {
    start: Instant,
    extra_ms: f64,
    share: f64,
}

impl ExtraBudget {
    fn new(share: f64) -> ExtraBudget {
        ExtraBudget {
            start: Instant::now(),
            extra_ms: 0.0,
            share,
        }
    }

    /// `policy` with its adaptive budget cut to what this matrix has left.
    fn limit(&self, mut policy: engine::TimingPolicy) -> engine::TimingPolicy {
        let spent = self.start.elapsed().as_secs_f64() * 1e3;
        let left = self.share * (spent - self.extra_ms) + policy.ci_budget_ms - self.extra_ms;
        policy.ci_budget_ms = policy.ci_budget_ms.min(left.max(0.0));
        policy
    }

    fn spend(&mut self, st: &engine::TimeStats) {
        self.extra_ms += st.extra_ms;
    }
}

/// The measurement context of this build on `engine` in `precision`: the
/// kernel sources' hash, the program's build options and the engine version.
pub fn current_context(engine: &Engine, precision: Precision) -> Result<MeasurementContext> {
    Ok(MeasurementContext {
        kernel_sources_hash: selector::KernelSources::of(engine::kernels::SOURCES).hash,
        build_options: engine.build_options(precision)?,
        engine_version: engine::engine_version(),
    })
}

/// What labelling one matrix carries from scheme to scheme and bin to bin.
struct Session {
    matrix: MatrixId,
    device: DeviceId,
    precision: Precision,
    context: ContextId,
    /// The matrix on the device, and the x it is timed with.
    dm: AnyMatrix,
    x: Vec<f64>,
    kernels: Vec<KernelId>,
    /// What the database holds in this context (and what was timed since).
    have: HashMap<MeasurementKey, Timed>,
    /// Timings by the rows of their bin: shared between schemes.
    by_rows: HashMap<(RowsSignature, KernelId), Timed>,
    /// Whole-plan timings by their launches: shared between schemes.
    by_launch: SharedLaunches,
    budget: ExtraBudget,
    deadline: Option<Instant>,
}

impl Session {
    fn key(&self, scheme: Scheme, target: Target) -> MeasurementKey {
        MeasurementKey {
            matrix: self.matrix,
            device: self.device,
            precision: self.precision,
            scheme,
            target,
            context: self.context,
        }
    }

    fn out_of_time(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

impl Labeller<'_> {
    /// Registers the matrix (values as the device computes with them, see
    /// [`in_precision`]) in the database and returns its id.
    pub async fn register(
        &self,
        name: &str,
        source: &str,
        a: &Csr<f64>,
        features: &Features,
    ) -> Result<MatrixId> {
        Ok(self
            .store
            .upsert_matrix(&MatrixRecord {
                content_hash: a.content_hash(),
                name: name.to_string(),
                source: source.to_string(),
                nrows: a.nrows() as u64,
                ncols: a.ncols() as u64,
                nnz: a.nnz() as u64,
                features: FeatureVector::from_features(features),
            })
            .await?)
    }

    /// The stored id of this build's measurement context in `precision`.
    pub async fn context(&self, precision: Precision) -> Result<ContextId> {
        let c = current_context(self.engine, precision)?;
        Ok(self.store.upsert_context(&c).await?)
    }

    /// Labels one matrix in `precision`: times what the database lacks (in
    /// this build's context), stores it, and returns the complete labels.
    /// `deadline` stops between measurements (the labels returned are then
    /// partial and `Ok(None)` is returned).
    pub async fn label(
        &self,
        name: &str,
        source: &str,
        a: &Csr<f64>,
        precision: Precision,
        deadline: Option<Instant>,
    ) -> Result<Option<MatrixLabels>> {
        let features = Features::of(a);
        let matrix = self
            .register(name, source, &in_precision(a, precision), &features)
            .await?;
        let mut s = self.session(matrix, name, a, precision, deadline).await?;
        let mut out = MatrixLabels::new(matrix, name, features);
        for scheme in Scheme::all() {
            if !self
                .label_scheme(&mut s, &mut out, a.row_ptr(), scheme)
                .await?
            {
                return Ok(None);
            }
        }
        self.store_plans(&out, precision, s.context).await?;
        Ok(Some(out))
    }

    /// The matrix uploaded, with what the database already holds of it in
    /// this build's context (timings of other contexts are never reused).
    async fn session(
        &self,
        matrix: MatrixId,
        name: &str,
        a: &Csr<f64>,
        precision: Precision,
        deadline: Option<Instant>,
    ) -> Result<Session> {
        let context = self.context(precision).await?;
        let have = stored_in_context(
            self.store,
            matrix,
            self.device,
            precision,
            context,
            timing_entry,
        )
        .await?;
        let dm = self
            .engine
            .upload_as(a, precision)
            .with_context(|| format!("uploading {name}"))?;
        Ok(Session {
            matrix,
            device: self.device,
            precision,
            context,
            dm,
            x: test_vector(a.ncols()),
            kernels: kernel_order(),
            have,
            by_rows: HashMap::new(),
            by_launch: SharedLaunches::default(),
            budget: ExtraBudget::new(self.opts.ci_extra_share),
            deadline,
        })
    }

    /// Labels one scheme: every kernel on every bin, then the best plan as a
    /// whole. `false` when the deadline stopped it.
    async fn label_scheme(
        &self,
        s: &mut Session,
        out: &mut MatrixLabels,
        row_ptr: &[u32],
        scheme: Scheme,
    ) -> Result<bool> {
        let binning = Binning::new(row_ptr, scheme);
        let measured = async |bin| self.label_bin(s, &binning, bin).await;
        let Some((plan, bins_sum)) = plan_of_bins(out, &binning, scheme, measured).await? else {
            return Ok(false);
        };
        if plan.kernels.is_empty() {
            return Ok(true);
        }
        let pkey = s.key(scheme, Target::plan(&plan)?);
        let launch = engine::launch_key(&binning, &plan, LaunchMode::default())?;
        let total = if let Some(m) = s.by_launch.get(&launch) {
            // An earlier scheme's plan runs the same launches: its timing is
            // this plan's too (kept under this plan's key where none is stored).
            if let Entry::Vacant(e) = s.have.entry(pkey) {
                self.store_time(e.key(), m).await?;
                e.insert(m);
            }
            m
        } else if let Some(&m) = s.have.get(&pkey) {
            m
        } else {
            if s.out_of_time() {
                return Ok(false);
            }
            let st = self.time_whole(&s.dm, &binning, &plan, &s.x, &mut s.budget)?;
            let m = Timed::of(&st);
            self.store_time(&pkey, m).await?;
            s.have.insert(pkey, m);
            m
        };
        s.by_launch.keep(launch, total);
        out.plans
            .insert(scheme, SchemePlan::timed(plan, total, bins_sum));
        Ok(true)
    }

    /// Every kernel's time on one bin: stored, shared with a bin of the same
    /// rows, or timed now. `None` when the deadline stopped it.
    async fn label_bin(
        &self,
        s: &mut Session,
        binning: &Binning,
        bin: usize,
    ) -> Result<Option<Vec<(KernelId, Timed)>>> {
        let sig = rows_signature(binning, bin);
        let mut times: Vec<(KernelId, Timed)> = Vec::new();
        let mut best = f64::INFINITY;
        for k in s.kernels.clone() {
            let target = Target::Bin {
                bin: bin as u32,
                kernel: k,
            };
            let kkey = s.key(binning.scheme, target);
            let m = if let Some(&m) = s.have.get(&kkey) {
                m
            } else if let Some(&m) = s.by_rows.get(&(sig, k)) {
                // Same rows already timed under another scheme: same launch.
                self.store_time(&kkey, m).await?;
                m
            } else {
                if s.out_of_time() {
                    return Ok(None);
                }
                let m = self.time_bin(&s.dm, binning, (bin, k), &s.x, best, &mut s.budget)?;
                self.store_time(&kkey, m).await?;
                m
            };
            s.have.insert(kkey, m);
            s.by_rows.insert((sig, k), m);
            best = best.min(m.median_ms);
            times.push((k, m));
        }
        Ok(Some(times))
    }

    /// Stores each scheme's best plan, the oracle flagged.
    async fn store_plans(
        &self,
        out: &MatrixLabels,
        precision: Precision,
        context: ContextId,
    ) -> Result<()> {
        let oracle = out.oracle().map(|(s, _)| s);
        for (scheme, sp) in &out.plans {
            self.store
                .upsert_plan(&PlanRecord {
                    matrix: out.matrix,
                    device: self.device,
                    precision,
                    plan: sp.plan.clone(),
                    total_ms: sp.total_ms,
                    bins_sum_ms: Some(sp.bins_sum_ms),
                    is_oracle: Some(*scheme) == oracle,
                    context,
                })
                .await?;
        }
        Ok(())
    }

    /// Times one kernel on one bin: a first run, then (unless hopeless) the
    /// warm-up and repetitions, adaptive only for contenders of the best so far.
    fn time_bin(
        &self,
        dm: &AnyMatrix,
        binning: &Binning,
        (bin, k): (usize, KernelId),
        x: &[f64],
        best_so_far: f64,
        budget: &mut ExtraBudget,
    ) -> Result<Timed> {
        let pp = self
            .engine
            .prepare_bins_any(dm, binning, &[(bin, k)], LaunchMode::PerBin)?;
        let first = self.engine.time_any(dm, &pp, x, 0, 1)?;
        if self.opts.hopeless_factor > 0.0
            && best_so_far.is_finite()
            && first.median_ms > self.opts.hopeless_factor * best_so_far
        {
            return Ok(Timed::of(&first));
        }
        let mut policy = budget.limit(self.opts.policy);
        if first.median_ms > (1.0 + CONTENDER_MARGIN) * best_so_far {
            policy.ci_target = 0.0;
        }
        let st = self
            .engine
            .measure_any(dm, &pp, x, &policy, first.median_ms)?;
        budget.spend(&st);
        Ok(Timed::of(&st))
    }

    async fn store_time(&self, key: &MeasurementKey, m: Timed) -> Result<()> {
        self.store
            .insert_measurement(&NewMeasurement {
                key: key.clone(),
                median_ms: m.median_ms,
                spread_ms: m.spread_ms,
                repetitions: m.reps,
                ci_rel: m.ci_rel,
                run: self.run,
            })
            .await?;
        self.heartbeat.beat(self.store).await
    }

    /// Times a plan as a whole: a first run to size the repetitions, then the
    /// warm-up and the timed runs (adaptive within the matrix's budget).
    fn time_whole(
        &self,
        dm: &AnyMatrix,
        binning: &Binning,
        plan: &Plan,
        x: &[f64],
        budget: &mut ExtraBudget,
    ) -> Result<engine::TimeStats> {
        let pp = self
            .engine
            .prepare_binned_any(dm, binning, plan, LaunchMode::default())?;
        let est = self.engine.time_any(dm, &pp, x, 0, 1)?.median_ms;
        let policy = budget.limit(self.opts.policy);
        let st = self.engine.measure_any(dm, &pp, x, &policy, est)?;
        budget.spend(&st);
        Ok(st)
    }

    /// Times a given plan as a whole, now, and stores it under its plan key when
    /// the database has no timing for that key yet. Returns the median (ms).
    pub async fn plan_time(
        &self,
        matrix: MatrixId,
        dm: &AnyMatrix,
        binning: &Binning,
        plan: &Plan,
        x: &[f64],
    ) -> Result<f64> {
        let precision = dm.precision();
        let key = MeasurementKey {
            matrix,
            device: self.device,
            precision,
            scheme: plan.scheme,
            target: Target::plan(plan)?,
            context: self.context(precision).await?,
        };
        let mut budget = ExtraBudget::new(self.opts.ci_extra_share);
        let st = self.time_whole(dm, binning, plan, x, &mut budget)?;
        self.store_time(&key, Timed::of(&st)).await?;
        Ok(st.median_ms)
    }
}

/// The measurements the database holds for a matrix on a device in one
/// precision and measurement context, each made by `pick` into an entry of the
/// map (or left out).
async fn stored_in_context<K: Eq + Hash, V>(
    store: &Store,
    matrix: MatrixId,
    device: DeviceId,
    precision: Precision,
    context: ContextId,
    pick: impl Fn(NewMeasurement) -> Option<(K, V)>,
) -> Result<HashMap<K, V>> {
    Ok(store
        .measurements_for(matrix, device, precision)
        .await?
        .into_iter()
        .map(|m| m.data)
        .filter(|m| m.key.context == context)
        .filter_map(pick)
        .collect())
}

/// A stored measurement as a timing by its key: what labelling reuses.
fn timing_entry(m: NewMeasurement) -> Option<(MeasurementKey, Timed)> {
    Some((m.key.clone(), Timed::stored(&m)))
}

/// The labels of one matrix rebuilt from the database alone, without a device:
/// what [`Labeller::label`] would return once everything is measured. `None` when
/// any measurement it needs is missing (labelling of that matrix was cut short).
#[allow(clippy::too_many_arguments)]
pub async fn labels_from_store(
    store: &Store,
    device: DeviceId,
    precision: Precision,
    context: ContextId,
    matrix: MatrixId,
    name: &str,
    features: Features,
    row_ptr: &[u32],
) -> Result<Option<MatrixLabels>> {
    let have = stored_in_context(store, matrix, device, precision, context, timing_entry).await?;
    let key = |scheme: Scheme, target: Target| MeasurementKey {
        matrix,
        device,
        precision,
        scheme,
        target,
        context,
    };
    let kernels = kernel_order();
    let mut out = MatrixLabels::new(matrix, name, features);
    let mut by_launch = SharedLaunches::default();
    for scheme in Scheme::all() {
        let binning = Binning::new(row_ptr, scheme);
        let stored = async |bin: usize| -> Result<Option<Vec<(KernelId, Timed)>>> {
            let bin = bin as u32;
            Ok(kernels
                .iter()
                .map(|&kernel| {
                    let t = have.get(&key(scheme, Target::Bin { bin, kernel }))?;
                    Some((kernel, *t))
                })
                .collect())
        };
        let Some((plan, bins_sum)) = plan_of_bins(&mut out, &binning, scheme, stored).await? else {
            return Ok(None);
        };
        if plan.kernels.is_empty() {
            continue;
        }
        let launch = engine::launch_key(&binning, &plan, LaunchMode::default())?;
        let total = match by_launch.get(&launch) {
            Some(m) => m,
            None => match have.get(&key(scheme, Target::plan(&plan)?)) {
                Some(&m) => m,
                None => return Ok(None),
            },
        };
        by_launch.keep(launch, total);
        out.plans
            .insert(scheme, SchemePlan::timed(plan, total, bins_sum));
    }
    Ok(Some(out))
}

/// Whole-plan times stored for a matrix (from labelling and from evaluations on
/// the device), by canonical plan: what an evaluation without the device reuses.
pub async fn stored_plan_times(
    store: &Store,
    device: DeviceId,
    precision: Precision,
    context: ContextId,
    matrix: MatrixId,
) -> Result<HashMap<String, f64>> {
    let plan_time = |m: NewMeasurement| match m.key.target {
        Target::Plan(json) => Some((json, m.median_ms)),
        Target::Bin { .. } => None,
    };
    stored_in_context(store, matrix, device, precision, context, plan_time).await
}

/// The labelling of one scheme's bins, wherever the times come from (the
/// device while labelling, the store when rebuilding labels from it):
/// `bin_times` gives each non-empty bin's kernel times, or `None` when they
/// cannot be had (the deadline passed, a measurement is missing), which stops
/// the scheme. Each bin is kept by [`keep_bin`]; returns the plan of the bins'
/// fastest kernels and the sum of their times.
async fn plan_of_bins(
    out: &mut MatrixLabels,
    binning: &Binning,
    scheme: Scheme,
    mut bin_times: impl AsyncFnMut(usize) -> Result<Option<Vec<(KernelId, Timed)>>>,
) -> Result<Option<(Plan, f64)>> {
    let mut plan = Plan {
        scheme,
        kernels: Vec::new(),
    };
    let mut bins_sum = 0.0;
    for bin in binning.nonempty_bins() {
        let Some(times) = bin_times(bin).await? else {
            return Ok(None);
        };
        bins_sum += keep_bin(out, &mut plan, bin, times);
    }
    Ok(Some((plan, bins_sum)))
}

/// Keeps a bin's kernel times (and their CIs) in `out` and gives the bin its
/// fastest kernel in `plan`; returns that kernel's time.
fn keep_bin(
    out: &mut MatrixLabels,
    plan: &mut Plan,
    bin: usize,
    times: Vec<(KernelId, Timed)>,
) -> f64 {
    let (bk, bt) = times
        .iter()
        .map(|(k, t)| (*k, t.median_ms))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .expect("at least one kernel");
    plan.kernels.push((bin, bk));
    let key = (plan.scheme, bin);
    out.bin_ci.insert(
        key,
        times
            .iter()
            .map(|(k, t)| (*k, t.ci_rel.unwrap_or(0.0)))
            .collect(),
    );
    out.bins
        .insert(key, times.iter().map(|(k, t)| (*k, t.median_ms)).collect());
    bt
}

#[cfg(test)]
mod tests {
    use super::ExtraBudget;

    #[test]
    fn the_adaptive_budget_of_a_matrix_is_a_share_of_its_base_time() {
        let policy = engine::TimingPolicy::default();
        let mut b = ExtraBudget::new(0.5);
        // At the start: one measurement's budget.
        assert!((b.limit(policy).ci_budget_ms - policy.ci_budget_ms).abs() < 1.0);
        // 100 ms of base time, 40 ms already spent on adaptive batches: the
        // allowance 0.5 * 60 + 20 - 40 = 10 ms.
        b.start -= std::time::Duration::from_millis(100);
        b.extra_ms = 40.0;
        let left = b.limit(policy).ci_budget_ms;
        assert!((9.0..=11.0).contains(&left), "{left}");
        // Spent beyond the share: nothing left.
        b.extra_ms = 90.0;
        assert_eq!(b.limit(policy).ci_budget_ms, 0.0);
        assert_eq!(b.limit(policy).ci_target, policy.ci_target);
    }
}
