package io.lakestream.delta;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Delta's log store for S3 that commits with a conditional put.
 *
 * <p>Delta's own S3 log store (S3SingleDriverLogStore) checks that a commit file does not exist
 * and then writes it with a plain PUT: writers in one JVM exclude each other with a lock, but a
 * writer in another process (another Spark driver, or delta-rs) that creates the same version
 * between the check and the PUT has its commit overwritten. This store asks S3A (Hadoop 3.4.2+)
 * to send the commit's PUT with {@code If-None-Match: *}, so the store itself refuses the second
 * writer of a version; Delta then reads the winner's commit and retries at the next version, as
 * for any concurrent commit. Files are written whole by one PUT, so partial writes are never
 * visible. Overwrites (checkpoints' {@code _last_checkpoint}) stay plain PUTs.
 */
public class ConditionalPutLogStore extends HadoopFileSystemLogStore {
  /** The S3A create option that turns a PUT into a conditional one (If-None-Match: *). */
  public static final String CONDITIONAL = "fs.option.create.conditional.overwrite";

  public ConditionalPutLogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    FileSystem fs = path.getFileSystem(hadoopConf);
    if (!overwrite && fs.exists(path)) {
      throw new FileAlreadyExistsException(path.toString());
    }
    OutputStream stream = overwrite
        ? fs.create(path, true)
        : (OutputStream) fs.createFile(path).overwrite(false).must(CONDITIONAL, true).build();
    try {
      while (actions.hasNext()) {
        stream.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
      }
      stream.close();  // the PUT: refused with 412 when another writer created the file first
    } catch (IOException error) {
      if (!overwrite && refusedAsExisting(error)) {
        throw new FileAlreadyExistsException(path.toString());
      }
      throw error;
    }
  }

  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
    return false;
  }

  /** Whether the store refused the PUT because the file exists (412 Precondition Failed). */
  static boolean refusedAsExisting(Throwable error) {
    for (Throwable cause = error; cause != null; cause = cause.getCause()) {
      String name = cause.getClass().getSimpleName();
      String text = String.valueOf(cause.getMessage());
      if (name.equals("RemoteFileChangedException") || name.equals("FileAlreadyExistsException")
          || text.contains("412") || text.contains("PreconditionFailed")) {
        return true;
      }
    }
    return false;
  }
}
