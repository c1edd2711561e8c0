// Commits the snapshots of one bench/big_table.py table through the Iceberg Java API (issue 24 §2).
// Run by bench/big_table.py; arguments: sqlite-db warehouse-uri table snapshots files-per-snapshot
// snapshots-per-transaction merged(true|false) tiny-parquet-file. An existing table is continued up
// to `snapshots` snapshots in all (every checkpoint is a consistent table: a build can be stopped).
//
// The snapshots are committed to an in-memory TableOperations (MemOps) and the catalog gets the
// result every `snapshots-per-transaction` snapshots: one metadata.json and one catalog update per
// checkpoint, as a Transaction would, but without a Transaction's clean-up pass, which re-reads the
// manifest list of every snapshot it committed (R40).
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.AppendFiles;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DataFiles;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.Schema;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.LocationProviders;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.LocationProvider;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.types.Types;

public class BigTableBuilder {
  /** A table's metadata kept in memory between checkpoints; files go through the catalog's FileIO. */
  static final class MemOps implements TableOperations {
    private TableMetadata current;
    private final FileIO io;

    MemOps(TableMetadata current, FileIO io) {
      this.current = current;
      this.io = io;
    }

    @Override public TableMetadata current() { return current; }
    @Override public TableMetadata refresh() { return current; }
    @Override public void commit(TableMetadata base, TableMetadata metadata) {
      if (base != current) {
        throw new CommitFailedException("stale base");
      }
      current = metadata;
    }
    @Override public FileIO io() { return io; }
    @Override public String metadataFileLocation(String file) { return current.location() + "/metadata/" + file; }
    @Override public LocationProvider locationProvider() {
      return LocationProviders.locationsFor(current.location(), current.properties());
    }
    void reset(TableMetadata metadata) { current = metadata; }
  }

  public static void main(String[] args) throws Exception {
    String db = args[0];
    String warehouse = args[1];
    String name = args[2];
    int snapshots = Integer.parseInt(args[3]);
    int files = Integer.parseInt(args[4]);
    int perTransaction = Integer.parseInt(args[5]);
    boolean merged = Boolean.parseBoolean(args[6]);
    Path source = Paths.get(args[7]);

    Map<String, String> catalogProps = new HashMap<>();
    catalogProps.put("uri", "jdbc:sqlite:" + db);
    catalogProps.put("warehouse", warehouse);
    catalogProps.put("jdbc.schema-version", "V1");
    JdbcCatalog catalog = new JdbcCatalog();
    catalog.setConf(new Configuration());
    catalog.initialize("bigplan", catalogProps);
    Namespace ns = Namespace.of("ns");
    if (!catalog.namespaceExists(ns)) {
      catalog.createNamespace(ns);
    }
    Map<String, String> tableProps = new HashMap<>();
    tableProps.put("format-version", "2");
    tableProps.put("write.metadata.delete-after-commit.enabled", "true");
    tableProps.put("write.metadata.previous-versions-max", "2");
    Schema schema = new Schema(Types.NestedField.required(1, "id", Types.LongType.get()));
    TableIdentifier id = TableIdentifier.of(ns, name);
    Table table = catalog.tableExists(id)
        ? catalog.loadTable(id)
        : catalog.createTable(id, schema, PartitionSpec.unpartitioned(), tableProps);
    int existing = table.snapshots() == null ? 0 : org.apache.iceberg.relocated.com.google.common.collect.Iterables.size(table.snapshots());
    Path data = Paths.get(URI.create(table.location() + "/data"));
    Files.createDirectories(data);
    long size = Files.size(source);
    long started = System.nanoTime();
    long links = 0;
    Path linked = source;
    TableOperations catalogOps = ((HasTableOperations) table).operations();
    TableMetadata checkpoint = catalogOps.refresh();
    MemOps mem = new MemOps(checkpoint, catalogOps.io());
    Table memTable = new BaseTable(mem, table.name());
    for (int first = existing; first < snapshots; first += perTransaction) {
      int end = Math.min(first + perTransaction, snapshots);
      for (int s = first; s < end; s++) {
        AppendFiles append = merged ? memTable.newAppend() : memTable.newFastAppend();
        for (int j = 0; j < files; j++) {
          Path path = data.resolve(String.format("s%05d-%03d.parquet", s, j));
          if (!Files.exists(path)) {
            if (links++ % 60000 == 0) {  // ext4 allows 65,000 links to one inode: a fresh copy now and then
              linked = data.resolve("source-" + s + "-" + j + ".bin");
              Files.copy(source, linked, java.nio.file.StandardCopyOption.REPLACE_EXISTING);
            }
            Files.createLink(path, linked);
          }
          DataFile file = DataFiles.builder(table.spec())
              .withPath(path.toUri().toString())
              .withFormat(FileFormat.PARQUET)
              .withFileSizeInBytes(size)
              .withRecordCount(10)
              .build();
          append.appendFile(file);
        }
        append.commit();
      }
      catalogOps.commit(checkpoint, mem.current());  // one metadata.json, one catalog update
      checkpoint = catalogOps.refresh();
      mem.reset(checkpoint);
      System.out.printf("  %s: %d/%d snapshots (%.0f s)%n", name, end, snapshots, (System.nanoTime() - started) / 1e9);
      System.out.flush();
    }
  }
}
