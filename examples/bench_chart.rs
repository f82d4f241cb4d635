//! PNG chart of completion tok/s against concurrent streams, for tollgate and llama.cpp, from
//! the JSON that `scripts/bench/bench-vs-llamacpp --json FILE` writes (its `raw.<server>.aggregate_N`
//! figures). Run by that script; by hand:
//! `cargo run --release --features chart --example bench_chart -- bench.json chart.png [font.ttf]`.
//! The font defaults to Debian's DejaVu Sans (`fonts-dejavu-core`). Uses plotters only.

use anyhow::{anyhow, bail, Context, Result};
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

/// `(concurrent streams, completion tok/s)` points of one server, sorted by streams.
fn series(raw: &serde_json::Value, server: &str) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = raw[server]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            let n: f64 = k.strip_prefix("aggregate_")?.parse().ok()?;
            Some((n, v.as_f64()?))
        })
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (input, output) = match args.as_slice() {
        [i, o, ..] => (i, o),
        _ => bail!("usage: bench_chart BENCH.json OUT.png [FONT.ttf]"),
    };
    let font = args
        .get(2)
        .map(String::as_str)
        .unwrap_or("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf");
    let bytes = std::fs::read(font).with_context(|| format!("reading font {font}"))?;
    register_font(
        "sans-serif",
        FontStyle::Normal,
        Box::leak(bytes.into_boxed_slice()),
    )
    .map_err(|_| anyhow!("{font} is not a TrueType font"))?;

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(input).with_context(|| input.clone())?)?;
    let lines = [
        ("tollgate", series(&json["raw"], "tollgate"), BLUE),
        ("llama.cpp", series(&json["raw"], "llama.cpp"), RED),
    ];
    if lines.iter().any(|(_, p, _)| p.is_empty()) {
        bail!("{input} has no raw.<server>.aggregate_N figures");
    }
    let max_x = lines
        .iter()
        .flat_map(|l| &l.1)
        .map(|p| p.0)
        .fold(1.0, f64::max);
    let max_y = lines
        .iter()
        .flat_map(|l| &l.1)
        .map(|p| p.1)
        .fold(1.0, f64::max);

    let root = BitMapBackend::new(output, (900, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!(
        "Completion tok/s vs concurrent streams ({} threads, {} max tokens)",
        json["threads"], json["max_tokens"]
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(0f64..max_x * 1.05, 0f64..max_y * 1.15)?;
    chart
        .configure_mesh()
        .x_desc("concurrent streams")
        .y_desc("aggregate completion tok/s")
        .label_style(("sans-serif", 15))
        .draw()?;
    for (name, points, color) in lines {
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(3)))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 5, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    println!("chart: {output}");
    Ok(())
}
