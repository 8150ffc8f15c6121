//! A Parquet corpus read a chunk at a time: one string column, a row group's pages at a time, so memory holds
//! a chunk and a page whatever the file's size. Row `i` of the output is row `i` of the file, so a null text is
//! an error (naming its row) rather than a row silently left out.

use std::fs::File;
use std::path::Path;

use anyhow::{anyhow, bail, Context};
use parquet::basic::{Compression, ConvertedType, LogicalType, Type as PhysicalType};
use parquet::column::reader::{ColumnReader, ColumnReaderImpl};
use parquet::data_type::{ByteArray, ByteArrayType};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::schema::types::ColumnDescriptor;

pub struct ParquetTexts {
    reader: SerializedFileReader<File>,
    column: usize,
    /// An optional column: each value has a definition level, 0 where it is null.
    nullable: bool,
    /// The row group the next reader opens.
    next_group: usize,
    current: Option<ColumnReaderImpl<ByteArrayType>>,
    /// Rows read so far (0-based index of the next), for errors.
    row: usize,
    name: String,
}

impl ParquetTexts {
    /// Opens `path` and finds the top-level string column `field`.
    pub fn open(path: &Path, field: &str) -> anyhow::Result<ParquetTexts> {
        let name = path.display().to_string();
        let file = File::open(path).with_context(|| format!("--input {name}"))?;
        let reader = SerializedFileReader::new(file).map_err(|e| anyhow!("--input {name}: not a Parquet file: {e}"))?;
        let schema = reader.metadata().file_metadata().schema_descr();
        let Some(column) = (0..schema.num_columns()).find(|&i| schema.column(i).path().parts() == [field]) else {
            let names: Vec<String> =
                schema.root_schema().get_fields().iter().map(|f| format!("`{}`", f.name())).collect();
            bail!("{name}: no column `{field}` (--text-field); its columns are {}", names.join(", "));
        };
        let descr = schema.column(column);
        let is_text = descr.physical_type() == PhysicalType::BYTE_ARRAY
            && descr.max_rep_level() == 0
            && matches!(descr.logical_type_ref(), None | Some(LogicalType::String))
            && matches!(descr.converted_type(), ConvertedType::NONE | ConvertedType::UTF8);
        if !is_text {
            bail!("{name}: column `{field}` holds {}, not a string per row", describe(&descr));
        }
        // A codec this build does not read is named now, not at the row group that uses it.
        for group in reader.metadata().row_groups() {
            let codec = group.column(column).compression();
            if !matches!(
                codec,
                Compression::UNCOMPRESSED
                    | Compression::SNAPPY
                    | Compression::GZIP(_)
                    | Compression::LZ4
                    | Compression::LZ4_RAW
            ) {
                let codec = format!("{codec:?}");
                let codec = codec.split('(').next().unwrap_or_default();
                bail!(
                    "{name}: column `{field}` is compressed with {codec}, which aleph embed does not read (it \
                     reads snappy, gzip, lz4 and uncompressed files): rewrite it, e.g. with pyarrow's \
                     write_table(..., compression=\"snappy\")"
                );
            }
        }
        let nullable = descr.max_def_level() > 0;
        Ok(ParquetTexts { reader, column, nullable, next_group: 0, current: None, row: 0, name })
    }

    /// How many rows the file holds (its footer says; nothing is read).
    pub fn count(path: &Path) -> anyhow::Result<usize> {
        let file = File::open(path).with_context(|| format!("--input {}", path.display()))?;
        let reader = SerializedFileReader::new(file)
            .map_err(|e| anyhow!("--input {}: not a Parquet file: {e}", path.display()))?;
        Ok(reader.metadata().file_metadata().num_rows().max(0) as usize)
    }

    /// Up to `n` more texts; empty at the end.
    pub fn next_chunk(&mut self, n: usize) -> anyhow::Result<Vec<String>> {
        let mut out = Vec::with_capacity(n);
        let (mut values, mut levels) = (Vec::<ByteArray>::new(), Vec::<i16>::new());
        let nullable = self.nullable;
        while out.len() < n {
            let Some(column) = self.column()? else { break };
            values.clear();
            levels.clear();
            let (rows, _, _) = column
                .read_records(n - out.len(), nullable.then_some(&mut levels), None, &mut values)
                .map_err(|e| anyhow!("{}: row {}: {e}", self.name, self.row))?;
            if rows == 0 {
                self.current = None;
                continue;
            }
            let mut values = values.drain(..);
            for i in 0..rows {
                // Levels are read only for an optional column; 0 there is a null.
                if levels.get(i) == Some(&0) {
                    bail!("{}: row {} has no text (null)", self.name, self.row + i);
                }
                let value = values.next().ok_or_else(|| anyhow!("{}: row {}: a value missing", self.name, self.row))?;
                let text = String::from_utf8(value.data().to_vec())
                    .map_err(|_| anyhow!("{}: row {}: the text is not UTF-8", self.name, self.row + i))?;
                out.push(text);
            }
            self.row += rows;
        }
        Ok(out)
    }

    /// Skips `n` rows (those a resumed run already wrote): whole row groups by their footer counts, the rest
    /// by the column reader, which skips pages without decoding them where it can.
    pub fn skip(&mut self, n: usize) -> anyhow::Result<()> {
        let mut left = n;
        while left > 0 {
            if self.current.is_none() {
                let groups = self.reader.metadata().row_groups();
                let Some(group) = groups.get(self.next_group) else {
                    bail!("{}: the output already holds {n} vectors, more than the corpus's rows", self.name);
                };
                let rows = group.num_rows().max(0) as usize;
                if rows <= left {
                    self.next_group += 1;
                    self.row += rows;
                    left -= rows;
                    continue;
                }
            }
            let Some(column) = self.column()? else { continue };
            let skipped = column.skip_records(left).map_err(|e| anyhow!("{}: row {}: {e}", self.name, self.row))?;
            if skipped == 0 {
                self.current = None;
            }
            self.row += skipped;
            left -= skipped;
        }
        Ok(())
    }

    /// The reader of the current row group, opening the next where the last is done; `None` at the end.
    fn column(&mut self) -> anyhow::Result<Option<&mut ColumnReaderImpl<ByteArrayType>>> {
        if self.current.is_none() {
            if self.next_group >= self.reader.num_row_groups() {
                return Ok(None);
            }
            let group = self.reader.get_row_group(self.next_group).map_err(|e| anyhow!("{}: {e}", self.name))?;
            self.next_group += 1;
            match group.get_column_reader(self.column).map_err(|e| anyhow!("{}: {e}", self.name))? {
                ColumnReader::ByteArrayColumnReader(reader) => self.current = Some(reader),
                _ => bail!("{}: the text column changed type between row groups", self.name),
            }
        }
        Ok(self.current.as_mut())
    }
}

/// A column's type in Parquet's words, for errors.
fn describe(descr: &ColumnDescriptor) -> String {
    if descr.max_rep_level() > 0 {
        return "a list".into();
    }
    match descr.logical_type_ref() {
        Some(logical) => format!("{} ({logical:?})", descr.physical_type()),
        None => descr.physical_type().to_string(),
    }
}
