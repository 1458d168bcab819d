"""Calibration: measure one decoder layer's kernels on a device, fit the cost model's constants, validate
them on held-out shapes, and write a ``costmodels.Profile``.

    kvsim calibrate --device cuda --model llama-3-8b --out costmodels/profiles/my-h100.yaml
    kvsim calibrate --device cpu --model llama-3-8b --out /tmp/cpu.yaml --quick
    kvsim calibrate fit                       # the public GPU tables in ../shared/data
    kvsim cost --profile h100-public --model llama-3-8b --decode-batch 32 --decode-ctx 2000

One job per module:
  samples          typed records (Timing, Shape, Sample) and TP shards of a model
  timing           CUDA-event / perf_counter timers: warm-up by time, cold L2, median + p20/p80
  grids            the shapes a sweep measures (quick and full)
  measure_gemm     GEMMs, elementwise ops and LM head of one layer
  measure_attention  prefill/append and paged decode attention (torch SDPA; FlashInfer on a GPU)
  measure_copy     pinned H2D/D2H copies by size and count; copy/compute overlap and the pipeline
  sweep_plan       a sweep's shapes as ordered jobs; the time budget that thins its grid
  measure          a whole sweep -> Measurements
  raw_sweep        the raw CSV of a running sweep: each shape appended at once, resume
  progress         shapes done / total, elapsed, ETA on stderr
  fit              the cost model's forms, fitted in relative error with non-negative constants
  validate         random and extrapolation held-out splits, error statistics, the table
  local            Measurements -> fits -> validation -> Profile
  public_tables    readers for the Vidur and LLMServingSim tables
  public_profiles  fits of those tables and the committed a100-vidur / h100-public profiles
  miss_plots       predicted against measured for every held-out split over its target
  profile_writer   fitted terms -> Profile, validation block, notes (Pensieve constants)
  validate_forward replay simulated batch shapes as real one-layer forwards
  samples_io       raw samples to/from CSV
  report_tables    held-out validation and forward replay tables (CSV, Markdown)
  measure_scorer   a token-budget scorer (4-layer MLP over a key): seconds per key
  replay_layout    replay exported paged-layout iterations (FlashInfer or torch) against the model

torch (and FlashInfer) are imported lazily inside the measuring modules: importing this package,
fitting and validating need only numpy and scipy. Imports ``costmodels`` and nothing else of the
project, except ``replay_layout``'s command line, which reads layouts with ``sim.paged_layout``.
"""
