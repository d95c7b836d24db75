//! Probe: copy-kernel variants on the device (for choosing the bandwidth-bound kernel).
use ocl::{Buffer, Event, Kernel, ProQue};
fn main() -> ocl::Result<()> {
    let src = r#"
__kernel void c1(const uint n, __global const float4* a, __global float4* b) { uint i = get_global_id(0); if (i < n) b[i] = a[i]; }
__kernel void c2(const uint n, __global const float4* a, __global float4* b) { uint i = get_global_id(0); b[i] = a[i]; }
__kernel void c3(const uint n, __global const float4* restrict a, __global float4* restrict b) {
  uint per = n / get_global_size(0); uint s = get_global_id(0) * per; for (uint k = s; k < s + per; ++k) b[k] = a[k]; }
__kernel void c4(const uint n, __global const float16* a, __global float16* b) { uint i = get_global_id(0); b[i] = a[i]; }
"#;
    let n: usize = 16 << 20; // float4 elements = 256 MiB
    let pq = ProQue::builder().src(src).dims(n).build()?;
    let q = pq.queue().clone();
    let q2 = ocl::Queue::new(
        pq.context(),
        pq.device(),
        Some(ocl::flags::QUEUE_PROFILING_ENABLE),
    )?;
    let a = Buffer::<f32>::builder()
        .queue(q.clone())
        .len(n * 4)
        .fill_val(1.0)
        .build()?;
    let b = Buffer::<f32>::builder()
        .queue(q.clone())
        .len(n * 4)
        .fill_val(0.0)
        .build()?;
    for (name, gws, lws) in [
        ("c1", n, 256),
        ("c2", n, 256),
        ("c1", n, 64),
        ("c1", n, 1024),
        ("c3", 4096, 64),
        ("c3", 256, 16),
        ("c4", n / 4, 256),
    ] {
        let k = Kernel::builder()
            .program(pq.program())
            .name(name)
            .queue(q2.clone())
            .global_work_size(gws)
            .local_work_size(lws)
            .arg(n as u32)
            .arg(&b)
            .arg(&a)
            .build()?;
        let mut ts = vec![];
        for _ in 0..8 {
            let mut ev = Event::empty();
            unsafe {
                k.cmd().enew(&mut ev).enq()?;
            }
            q2.finish()?;
            let s = ev
                .profiling_info(ocl::enums::ProfilingInfo::Start)?
                .time()?;
            let e = ev.profiling_info(ocl::enums::ProfilingInfo::End)?.time()?;
            ts.push((e - s) as f64 * 1e-9);
        }
        ts.sort_by(f64::total_cmp);
        println!(
            "{name} gws {gws} lws {lws}: {:.2} GB/s (min time), median {:.2}",
            (2 * n * 16) as f64 / ts[0] / 1e9,
            (2 * n * 16) as f64 / ts[4] / 1e9
        );
    }
    Ok(())
}
