// How bench/ort_profile.js and bench/ort_op_times.js time several ONNX Runtime sessions in one
// process, so that the two keep one policy.
//
// At one intra-op thread the sessions alternate run by run (A/B/A/B), so that they see the same
// machine noise, as `fusectl profile` does for its two sides. Above one thread they run one after
// another, each warmed up just before its runs: each session's intra-op workers spin for a while
// after its run (allow_spinning, on by default, which is what makes ONNX Runtime fast on
// back-to-back runs), and alternating two sessions let the idle one's spinning workers take the
// cores from the running one (MobileNetV2 at 2 threads: 9.6 ms with both sessions A/B against
// 4.1 ms alone). run_profile_bench.sh's rounds still alternate the processes.
'use strict';

// run(k) runs session k once (a promise). Returns each session's run times in ms, in run order.
async function timeSessions(count, run, { threads, warmup, runs }) {
  const ms = Array.from({ length: count }, () => []);
  const timed = async (k) => {
    const t0 = process.hrtime.bigint();
    await run(k);
    ms[k].push(Number(process.hrtime.bigint() - t0) / 1e6);
  };
  if (threads > 1) {
    for (let k = 0; k < count; ++k) {
      for (let i = 0; i < warmup; ++i) await run(k);
      for (let r = 0; r < runs; ++r) await timed(k);
    }
  } else {
    for (let k = 0; k < count; ++k) for (let i = 0; i < warmup; ++i) await run(k);
    for (let r = 0; r < runs; ++r) {
      for (let k = 0; k < count; ++k) await timed(k);
    }
  }
  return ms;
}

module.exports = { timeSessions };
